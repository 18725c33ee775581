package storetest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// testEventAppendWithID: an event appended with NewEvent.ID is stored under that id; an id that exists, or
// that an append gives twice, is ErrConflict and appends nothing; an id without the event prefix is refused.
func testEventAppendWithID(t *testing.T, h Harness) {
	s := h.open(t)
	sess := createSession(t, s)
	other := createSession(t, s)
	id := apitype.NewID(apitype.PrefixEvent)
	named := agentMessage("named")
	named.ID = id
	got := appendEvents(t, s, sess.ID, userMessage("hi"), named, agentMessage("unnamed"))
	equal(t, got[1].ID, id, "returned id")
	if got[2].ID == "" || got[2].ID == id || !apitype.HasPrefix(got[2].ID, apitype.PrefixEvent) {
		t.Fatalf("unnamed event got id %q", got[2].ID)
	}
	ev, err := s.EventGet(ctxBg, sess.ID, id)
	must(t, err, "get the named event")
	equal(t, ev.Seq, int64(2), "seq of the named event")
	equal(t, allEvents(t, s, sess.ID)[1].ID, id, "listed id")

	dup := agentMessage("again")
	dup.ID = id
	for _, tc := range []struct {
		sessionID string
		events    []apitype.NewEvent
		what      string
	}{
		{sess.ID, []apitype.NewEvent{dup}, "an id the session's log has"},
		{other.ID, []apitype.NewEvent{agentMessage("fine"), dup}, "an id another session's log has"},
	} {
		_, err := s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: tc.sessionID, Events: tc.events})
		mustIs(t, err, store.ErrConflict, "append with "+tc.what)
	}
	fresh := apitype.NewID(apitype.PrefixEvent)
	a, b := agentMessage("a"), agentMessage("b")
	a.ID, b.ID = fresh, fresh
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: other.ID, Events: []apitype.NewEvent{a, b}})
	mustIs(t, err, store.ErrConflict, "append giving one id twice")
	bad := agentMessage("bad")
	bad.ID = "msg_123"
	if _, err := s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: other.ID, Events: []apitype.NewEvent{bad}}); err == nil {
		t.Fatal("append with an id without the event prefix succeeded")
	}
	equal(t, len(allEvents(t, s, sess.ID)), 3, "events after refused appends")
	equal(t, len(allEvents(t, s, other.ID)), 0, "other session's events after refused appends")
	// The id given twice was not stored by the refused append.
	a.ID, b.ID = fresh, ""
	appendEvents(t, s, other.ID, a)

	// Concurrent appends, one of them with a duplicate id: only that one fails.
	sessions := make([]*apitype.Session, 8)
	for i := range sessions {
		sessions[i] = createSession(t, s)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(sessions))
	for i, x := range sessions {
		wg.Go(func() {
			e := agentMessage("x")
			if i == 3 {
				e.ID = id
			} else {
				e.ID = apitype.NewID(apitype.PrefixEvent)
			}
			_, errs[i] = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: x.ID,
				Events: []apitype.NewEvent{userMessage("before"), e}})
		})
	}
	wg.Wait()
	for i, x := range sessions {
		if i == 3 {
			mustIs(t, errs[i], store.ErrConflict, "concurrent append with a duplicate id")
			equal(t, len(allEvents(t, s, x.ID)), 0, "events of the refused concurrent append")
			continue
		}
		must(t, errs[i], "concurrent append beside one with a duplicate id")
		equal(t, len(allEvents(t, s, x.ID)), 2, "events of a concurrent append")
	}
}

// testPreview: a preview subscriber receives the session's previews in order, not another session's, and
// nothing once unsubscribed; oversized payloads are refused. Stores that notify across processes also deliver
// to a subscriber of a second Store on the same database.
func testPreview(t *testing.T, h Harness) {
	dsn := h.NewDSN(t)
	s := openDSN(t, h, dsn)
	sess := createSession(t, s)
	other := createSession(t, s)

	// No subscriber: publishing is fine.
	must(t, s.PreviewPublish(ctxBg, sess.ID, []byte(`{"n":0}`)), "publish without subscribers")

	ch, stop := s.PreviewSubscribe(sess.ID)
	defer stop()
	otherCh, stopOther := s.PreviewSubscribe(other.ID)
	defer stopOther()
	want := []string{`{"n":1}`, `{"n":2,"text":"héllo ✓"}`, `{"n":3}`}
	for _, p := range want {
		must(t, s.PreviewPublish(ctxBg, sess.ID, []byte(p)), "publish")
	}
	for _, p := range want {
		equal(t, string(receivePreview(t, ch, "preview")), p, "preview payload")
	}
	noPreview(t, otherCh, "another session's subscriber")

	big := []byte(`{"t":"` + strings.Repeat("x", store.PreviewMaxBytes) + `"}`)
	if err := s.PreviewPublish(ctxBg, sess.ID, big); err == nil {
		t.Fatal("publishing a preview over PreviewMaxBytes succeeded")
	}
	max := []byte(`{"t":"` + strings.Repeat("é", (store.PreviewMaxBytes-8)/2) + `"}`)
	must(t, s.PreviewPublish(ctxBg, sess.ID, max), "publish a preview of nearly PreviewMaxBytes")
	equal(t, string(receivePreview(t, ch, "big preview")), string(max), "big preview")

	if s.Capabilities().CrossProcessNotify {
		s2 := openDSN(t, h, dsn)
		ch2, stop2 := s2.PreviewSubscribe(sess.ID)
		defer stop2()
		otherCh2, stopOther2 := s2.PreviewSubscribe(other.ID)
		defer stopOther2()
		must(t, s.PreviewPublish(ctxBg, sess.ID, []byte(`{"from":"s1"}`)), "publish for another store")
		equal(t, string(receivePreview(t, ch2, "preview from another store")), `{"from":"s1"}`, "payload")
		equal(t, string(receivePreview(t, ch, "preview in the publishing store")), `{"from":"s1"}`, "payload")
		must(t, s2.PreviewPublish(ctxBg, sess.ID, []byte(`{"from":"s2"}`)), "publish from the other store")
		equal(t, string(receivePreview(t, ch, "preview from the other store")), `{"from":"s2"}`, "payload")
		equal(t, string(receivePreview(t, ch2, "own preview")), `{"from":"s2"}`, "payload")
		noPreview(t, ch2, "the other store's subscriber after its previews (once each)")
		noPreview(t, otherCh2, "the other store's subscriber of another session")
		stop2()
		must(t, s.PreviewPublish(ctxBg, sess.ID, []byte(`{"after":"stop2"}`)), "publish")
		receivePreview(t, ch, "preview after the other store unsubscribed")
		noPreview(t, ch2, "the other store's subscriber after unsubscribing")
	}

	stop()
	must(t, s.PreviewPublish(ctxBg, sess.ID, []byte(`{"after":"stop"}`)), "publish after unsubscribing")
	noPreview(t, ch, "subscriber after unsubscribing")
	noPreview(t, otherCh, "another session's subscriber")

	// A slow subscriber loses previews; publishing never blocks on it.
	slow, stopSlow := s.PreviewSubscribe(sess.ID)
	defer stopSlow()
	ctx, cancel := context.WithTimeout(ctxBg, 30*time.Second)
	defer cancel()
	for range store.PreviewBuffer * 2 {
		must(t, s.PreviewPublish(ctx, sess.ID, []byte(`{"flood":true}`)), "publish to a slow subscriber")
	}
	if n := len(slow); n == 0 || n > store.PreviewBuffer*2 {
		t.Fatalf("slow subscriber holds %d previews", n)
	}
}

// openDSN opens a store on dsn, closed when the test ends.
func openDSN(t testing.TB, h Harness, dsn string) store.Store {
	t.Helper()
	s, err := h.Open(ctxBg, dsn)
	must(t, err, "open store")
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return s
}

func receivePreview(t testing.TB, ch <-chan []byte, what string) []byte {
	t.Helper()
	select {
	case p := <-ch:
		return p
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: not received", what)
		return nil
	}
}

// noPreview fails if ch receives a preview within a short while.
func noPreview(t testing.TB, ch <-chan []byte, what string) {
	t.Helper()
	select {
	case p := <-ch:
		t.Fatalf("%s received %s", what, p)
	case <-time.After(100 * time.Millisecond):
	}
}
