package storetest

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

func testEventAppend(t *testing.T, h Harness) {
	s := h.open(t)
	sess := createSession(t, s)
	before := apitype.Now()
	one := appendEvents(t, s, sess.ID, userMessage("hello"))
	batch := appendEvents(t, s, sess.ID, agentMessage("a"), agentMessage("b"),
		apitype.NewEvent{Type: apitype.EventSessionStatusIdle, Processed: true})
	after := apitype.Now()

	equal(t, len(one), 1, "appended one")
	equal(t, len(batch), 3, "appended batch")
	appended := append(one, batch...)
	checkContiguous(t, appended)
	for _, e := range appended {
		if !apitype.HasPrefix(e.ID, apitype.PrefixEvent) {
			t.Fatalf("event id %q lacks prefix %q", e.ID, apitype.PrefixEvent)
		}
		equal(t, e.SessionID, sess.ID, "session id")
		if e.CreatedAt.Before(before) || e.CreatedAt.After(after) {
			t.Fatalf("created_at %v outside [%v, %v]", e.CreatedAt, before, after)
		}
	}
	if one[0].ProcessedAt != nil {
		t.Fatalf("client event has processed_at %v", one[0].ProcessedAt)
	}
	for _, e := range batch {
		if e.ProcessedAt == nil || !e.ProcessedAt.Equal(e.CreatedAt) {
			t.Fatalf("server event %d: processed_at %v, want its created_at %v", e.Seq, e.ProcessedAt, e.CreatedAt)
		}
	}
	if !jsonEqual(batch[2].Data, []byte("{}")) {
		t.Fatalf("event without data: data %s, want {}", batch[2].Data)
	}

	stored := allEvents(t, s, sess.ID)
	equal(t, len(stored), len(appended), "stored events")
	for i, got := range stored {
		want := appended[i]
		equal(t, got.ID, want.ID, "id")
		equal(t, got.Seq, want.Seq, "seq")
		equal(t, got.Type, want.Type, "type")
		equal(t, got.SessionID, sess.ID, "session id")
		sameTime(t, got.CreatedAt, want.CreatedAt, "created_at")
		if (got.ProcessedAt == nil) != (want.ProcessedAt == nil) ||
			got.ProcessedAt != nil && !got.ProcessedAt.Equal(*want.ProcessedAt) {
			t.Fatalf("event %d: processed_at %v, want %v", got.Seq, got.ProcessedAt, want.ProcessedAt)
		}
		if !jsonEqual(got.Data, want.Data) {
			t.Fatalf("event %d: data %s, want %s", got.Seq, got.Data, want.Data)
		}
	}
	var msg apitype.UserMessage
	must(t, stored[0].DecodeData(&msg), "decode user message")
	equal(t, msg.Content[0].Text, "hello", "message text")

	_, err := s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: "sesn_missing", Events: []apitype.NewEvent{
		userMessage("nobody"),
	}})
	mustIs(t, err, store.ErrNotFound, "append to unknown session")

	// An event whose data is not a JSON object is refused, alone or in a batch, and nothing of its append is
	// written: a log entry that cannot be encoded would fail every later read of the session.
	for _, data := range []string{`not json`, `{"a":`, `[1,2]`, `"text"`, `null`, `{} {}`} {
		_, err := s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Events: []apitype.NewEvent{
			agentMessage("fine"), {Type: apitype.EventAgentMessage, Data: []byte(data), Processed: true},
		}})
		if err == nil {
			t.Fatalf("append with data %q succeeded", data)
		}
		_, _, err = s.SessionCreate(ctxBg, &store.SessionCreateParams{Session: newSession("agent_x", 1, apitype.Now()), InitialEvents: []apitype.NewEvent{
			{Type: apitype.EventUserMessage, Data: []byte(data)},
		}})
		if err == nil {
			t.Fatalf("session create with initial event data %q succeeded", data)
		}
	}
	equal(t, len(allEvents(t, s, sess.ID)), len(appended), "stored events after refused appends")
}

func testEventAppendConditions(t *testing.T, h Harness) {
	s := h.open(t)
	sess := createSession(t, s)
	appendEvents(t, s, sess.ID, userMessage("1"), agentMessage("2"))

	got, err := s.EventAppend(ctxBg, &store.EventAppendParams{
		SessionID: sess.ID, ExpectedSeq: 3, Events: []apitype.NewEvent{agentMessage("3"), agentMessage("4")},
	})
	must(t, err, "append with the right expected seq")
	equalSeqs(t, got, []int64{3, 4}, "seqs")

	for _, expected := range []int64{3, 4, 6, 100} {
		_, err := s.EventAppend(ctxBg, &store.EventAppendParams{
			SessionID: sess.ID, ExpectedSeq: expected, Events: []apitype.NewEvent{agentMessage("stale")},
			Status: apitype.StatusTerminated, Wake: true,
		})
		mustIs(t, err, store.ErrConflict, "append with expected seq "+strconv.FormatInt(expected, 10))
	}
	equalSeqs(t, allEvents(t, s, sess.ID), []int64{1, 2, 3, 4}, "failed appends add nothing")
	got2, err := s.SessionGet(ctxBg, sess.ID)
	must(t, err, "get session")
	equal(t, got2.Status, apitype.StatusIdle, "failed append changes no status")
	_, err = s.LeaseClaim(ctxBg, &store.LeaseClaimParams{Owner: "b", TTL: time.Minute, SessionID: sess.ID})
	mustIs(t, err, store.ErrNoWork, "failed append wakes nothing")

	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{
		SessionID: "sesn_missing", ExpectedSeq: 1, Events: []apitype.NewEvent{agentMessage("x")},
	})
	mustIs(t, err, store.ErrNotFound, "append to unknown session with expected seq")
}

func testEventAppendSessionState(t *testing.T, h Harness) {
	s := h.open(t)
	sess := createSession(t, s)
	usage := &apitype.SessionUsage{InputTokens: 100, OutputTokens: 20, CacheReadInputTokens: 7,
		CacheCreation: &apitype.CacheCreation{Ephemeral5mInputTokens: 3, Ephemeral1hInputTokens: 4},
		ServerToolUse: apitype.ServerToolUse{WebSearchRequests: 2, WebFetchRequests: 1},
		ListCost:      &apitype.Money{Amount: "2", Currency: "USD"}, ListCostPicodollars: 1<<53 + 1}
	_, err := s.EventAppend(ctxBg, &store.EventAppendParams{
		SessionID: sess.ID, Events: []apitype.NewEvent{{Type: apitype.EventSessionStatusRunning, Processed: true}},
		Status: apitype.StatusRunning, Usage: usage, ActiveSeconds: 1.5,
	})
	must(t, err, "append with status and usage")
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{
		SessionID: sess.ID, Events: []apitype.NewEvent{agentMessage("done")}, ActiveSeconds: 2.25,
	})
	must(t, err, "append with active seconds")

	got, err := s.SessionGet(ctxBg, sess.ID)
	must(t, err, "get session")
	equal(t, got.Status, apitype.StatusRunning, "status")
	equal(t, got.Usage.InputTokens, 100, "input tokens")
	equal(t, got.Usage.OutputTokens, 20, "output tokens")
	equal(t, got.Usage.CacheReadInputTokens, 7, "cache read tokens")
	if got.Usage.CacheCreation == nil || got.Usage.CacheCreation.Ephemeral5mInputTokens != 3 || got.Usage.CacheCreation.Ephemeral1hInputTokens != 4 {
		t.Fatalf("cache creation = %+v", got.Usage.CacheCreation)
	}
	// The list cost is kept exactly (an int64 past 2^53 would not survive a float).
	if u := got.Usage; u.ListCost == nil || *u.ListCost != *usage.ListCost || u.ListCostPicodollars != 1<<53+1 ||
		u.ServerToolUse != usage.ServerToolUse {
		t.Fatalf("list cost %+v (%d picodollars), server tools %+v", u.ListCost, u.ListCostPicodollars, u.ServerToolUse)
	}
	equal(t, got.Stats.ActiveSeconds, 3.75, "active seconds accumulate")

	// Usage replaces; status changes without events.
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{
		SessionID: sess.ID, Status: apitype.StatusIdle, Usage: &apitype.SessionUsage{InputTokens: 150},
	})
	must(t, err, "append state only")
	got, err = s.SessionGet(ctxBg, sess.ID)
	must(t, err, "get session")
	equal(t, got.Status, apitype.StatusIdle, "status")
	equal(t, got.Usage.InputTokens, 150, "usage replaced")
	equal(t, got.Usage.OutputTokens, 0, "usage replaced, not merged")
	equalSeqs(t, allEvents(t, s, sess.ID), []int64{1, 2}, "a state-only append adds no event")

	// Terminated is final: a later append's status (a brain's last write racing an archive) leaves it.
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{
		SessionID: sess.ID, Events: []apitype.NewEvent{{Type: apitype.EventSessionStatusTerminated}},
		Status: apitype.StatusTerminated,
	})
	must(t, err, "terminate")
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{
		SessionID: sess.ID, Events: []apitype.NewEvent{{Type: apitype.EventSessionStatusIdle}}, Status: apitype.StatusIdle,
	})
	must(t, err, "append after termination")
	got, err = s.SessionGet(ctxBg, sess.ID)
	must(t, err, "get session")
	equal(t, got.Status, apitype.StatusTerminated, "status after termination")
}

func testEventGet(t *testing.T, h Harness) {
	s := h.open(t)
	sess := createSession(t, s)
	other := createSession(t, s)
	events := appendEvents(t, s, sess.ID, userMessage("a"), agentMessage("b"))
	got, err := s.EventGet(ctxBg, sess.ID, events[1].ID)
	must(t, err, "get event")
	equal(t, got.ID, events[1].ID, "id")
	equal(t, got.Seq, 2, "seq")
	equal(t, got.Type, apitype.EventAgentMessage, "type")
	equal(t, got.SessionID, sess.ID, "session id")
	if !jsonEqual(got.Data, events[1].Data) {
		t.Fatalf("data %s, want %s", got.Data, events[1].Data)
	}
	_, err = s.EventGet(ctxBg, sess.ID, "sevt_missing")
	mustIs(t, err, store.ErrNotFound, "get unknown event")
	_, err = s.EventGet(ctxBg, other.ID, events[0].ID)
	mustIs(t, err, store.ErrNotFound, "get another session's event")
	_, err = s.EventGet(ctxBg, "sesn_missing", events[0].ID)
	mustIs(t, err, store.ErrNotFound, "get event of unknown session")
}

func testEventMarkProcessed(t *testing.T, h Harness) {
	s := h.open(t)
	sess := createSession(t, s, userMessage("1"), userMessage("2"), userMessage("3"))
	at := base.Add(time.Hour)
	must(t, s.EventMarkProcessed(ctxBg, &store.EventMarkProcessedParams{
		SessionID: sess.ID, Seqs: []int64{1, 3}, At: at,
	}), "mark processed")
	must(t, s.EventMarkProcessed(ctxBg, &store.EventMarkProcessedParams{
		SessionID: sess.ID, Seqs: []int64{1, 2}, At: at.Add(time.Hour),
	}), "mark processed again")
	events := allEvents(t, s, sess.ID)
	wantAt := []time.Time{at, at.Add(time.Hour), at}
	for i, e := range events {
		if e.ProcessedAt == nil || !e.ProcessedAt.Equal(wantAt[i]) {
			t.Fatalf("event %d: processed_at %v, want %v (set once)", e.Seq, e.ProcessedAt, wantAt[i])
		}
	}
	mustIs(t, s.EventMarkProcessed(ctxBg, &store.EventMarkProcessedParams{
		SessionID: "sesn_missing", Seqs: []int64{1}, At: at,
	}), store.ErrNotFound, "mark events of unknown session")
}

func testEventAppendMarkProcessed(t *testing.T, h Harness) {
	s := h.open(t)
	sess := createSession(t, s, userMessage("1"), userMessage("2"), userMessage("3"))
	early := base.Add(time.Hour)
	must(t, s.EventMarkProcessed(ctxBg, &store.EventMarkProcessedParams{SessionID: sess.ID, Seqs: []int64{2}, At: early}),
		"mark one processed")
	l, err := claim(s, "brain", time.Minute, sess.ID)
	must(t, err, "claim")

	// A failed condition marks nothing.
	stale := *l
	stale.Token = "stale"
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Lease: &stale, MarkProcessed: []int64{1},
		Events: []apitype.NewEvent{agentMessage("refused")}})
	mustIs(t, err, store.ErrLeaseLost, "append with a stale lease")
	if e := allEvents(t, s, sess.ID)[0]; e.ProcessedAt != nil {
		t.Fatalf("a refused append marked event 1 processed at %v", e.ProcessedAt)
	}

	out, err := s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Lease: l, MarkProcessed: []int64{1, 2, 3},
		Events: []apitype.NewEvent{agentMessage("running")}})
	must(t, err, "append marking events processed")
	events := allEvents(t, s, sess.ID)
	equal(t, len(events), 4, "events")
	wantAt := []time.Time{out[0].CreatedAt, early, out[0].CreatedAt}
	for i, e := range events[:3] {
		if e.ProcessedAt == nil || !e.ProcessedAt.Equal(wantAt[i]) {
			t.Fatalf("event %d: processed_at %v, want %v (the append's time, set once)", e.Seq, e.ProcessedAt, wantAt[i])
		}
	}
}

// logWithTypes appends 50 events: seq%5 == 0 is a user.message, the rest agent.message.
func logWithTypes(t testing.TB, s store.Store, sessionID string) {
	t.Helper()
	var batch []apitype.NewEvent
	for i := int64(1); i <= 50; i++ {
		if i%5 == 0 {
			batch = append(batch, userMessage("u"+strconv.FormatInt(i, 10)))
		} else {
			batch = append(batch, agentMessage("a"+strconv.FormatInt(i, 10)))
		}
	}
	appendEvents(t, s, sessionID, batch[:20]...)
	appendEvents(t, s, sessionID, batch[20:]...)
}

// EventListParams.MaxBytes ends a page at the event that brings its data to MaxBytes, and a page holds at
// least one event, whichever path answers (the log's recent tail, the database), in either order.
func testEventListMaxBytes(t *testing.T, h Harness) {
	s := h.open(t)
	sess := createSession(t, s)
	var batch []apitype.NewEvent
	for i := range 10 {
		batch = append(batch, agentMessage(strings.Repeat(strconv.Itoa(i), 1000+100*i)))
	}
	appendEvents(t, s, sess.ID, batch...)
	all := allEvents(t, s, sess.ID)
	size := func(seq int64) int { return len(all[seq-1].Data) }
	for _, tc := range []struct {
		name string
		p    store.EventListParams
		want []int64
	}{
		{"one byte: one event", store.EventListParams{MaxBytes: 1, Limit: 100}, seqRange(1, 1)},
		{"just over two events", store.EventListParams{MaxBytes: size(1) + size(2) + 1, Limit: 100}, seqRange(1, 3)},
		{"exactly two events", store.EventListParams{MaxBytes: size(1) + size(2), Limit: 100}, seqRange(1, 2)},
		{"after seq", store.EventListParams{AfterSeq: 4, MaxBytes: size(5) + 1, Limit: 100}, seqRange(5, 6)},
		{"limit first", store.EventListParams{MaxBytes: 1 << 20, Limit: 4}, seqRange(1, 4)},
		{"all", store.EventListParams{MaxBytes: 1 << 20, Limit: 100}, seqRange(1, 10)},
		{"desc", store.EventListParams{Desc: true, MaxBytes: size(10) + 1, Limit: 100}, seqRange(10, 9)},
		{"types", store.EventListParams{Types: []apitype.EventType{apitype.EventAgentMessage}, AfterSeq: 7, MaxBytes: 1,
			Limit: 100}, seqRange(8, 8)},
	} {
		p := tc.p
		p.SessionID = sess.ID
		got, err := s.EventList(ctxBg, &p)
		must(t, err, tc.name)
		equalSeqs(t, got, tc.want, tc.name)
	}
}

func testEventListSlices(t *testing.T, h Harness) {
	s := h.open(t)
	sess := createSession(t, s)
	logWithTypes(t, s, sess.ID)
	for _, tc := range []struct {
		name string
		p    store.EventListParams
		want []int64
	}{
		{"resume after seq", store.EventListParams{AfterSeq: 10, Limit: 5}, seqRange(11, 15)},
		{"the K events before N", store.EventListParams{BeforeSeq: 30, Desc: true, Limit: 5}, seqRange(29, 25)},
		{"range", store.EventListParams{AfterSeq: 10, BeforeSeq: 15, Limit: 100}, seqRange(11, 14)},
		{"range desc", store.EventListParams{AfterSeq: 10, BeforeSeq: 15, Desc: true, Limit: 100}, seqRange(14, 11)},
		{"everything before an action", store.EventListParams{BeforeSeq: 4, Limit: 100}, seqRange(1, 3)},
		{"latest", store.EventListParams{Desc: true, Limit: 3}, seqRange(50, 48)},
		{"all", store.EventListParams{Limit: 100}, seqRange(1, 50)},
		{"limit", store.EventListParams{Limit: 7}, seqRange(1, 7)},
		{"types", store.EventListParams{Types: []apitype.EventType{apitype.EventUserMessage}, Limit: 100},
			[]int64{5, 10, 15, 20, 25, 30, 35, 40, 45, 50}},
		{"types desc before", store.EventListParams{Types: []apitype.EventType{apitype.EventUserMessage}, BeforeSeq: 30,
			Desc: true, Limit: 2}, []int64{25, 20}},
		{"two types", store.EventListParams{Types: []apitype.EventType{apitype.EventUserMessage, apitype.EventAgentMessage},
			AfterSeq: 47, Limit: 100}, seqRange(48, 50)},
		{"unknown type", store.EventListParams{Types: []apitype.EventType{"nope"}, Limit: 100}, nil},
		{"past the end", store.EventListParams{AfterSeq: 50, Limit: 100}, nil},
	} {
		p := tc.p
		p.SessionID = sess.ID
		got, err := s.EventList(ctxBg, &p)
		must(t, err, tc.name)
		equalSeqs(t, got, tc.want, tc.name)
		for _, e := range got {
			if p.Types == nil {
				continue
			}
			found := false
			for _, typ := range p.Types {
				found = found || e.Type == typ
			}
			if !found {
				t.Fatalf("%s: event %d has type %s", tc.name, e.Seq, e.Type)
			}
		}
	}
	_, err := s.EventList(ctxBg, &store.EventListParams{SessionID: "sesn_missing", Limit: 10})
	mustIs(t, err, store.ErrNotFound, "list events of unknown session")
	empty := createSession(t, s)
	got, err := s.EventList(ctxBg, &store.EventListParams{SessionID: empty.ID, Limit: 10})
	must(t, err, "list events of empty session")
	equal(t, len(got), 0, "events of empty session")
}

func testEventListTimeFilters(t *testing.T, h Harness) {
	s := h.open(t)
	sess := createSession(t, s)
	var times []time.Time
	for i := range 3 {
		if i > 0 {
			time.Sleep(3 * time.Millisecond) // distinct created_at per batch, at microsecond precision
		}
		batch := appendEvents(t, s, sess.ID, agentMessage("x"), agentMessage("y"))
		equal(t, batch[0].CreatedAt.Equal(batch[1].CreatedAt), true, "one batch, one created_at")
		times = append(times, batch[0].CreatedAt)
	}
	t0, t1, t2 := times[0], times[1], times[2]
	if !t0.Before(t1) || !t1.Before(t2) {
		t.Fatalf("batch times not increasing: %v %v %v", t0, t1, t2)
	}
	for _, tc := range []struct {
		name string
		p    store.EventListParams
		want []int64
	}{
		{"created_after", store.EventListParams{CreatedAfter: &t0}, seqRange(3, 6)},
		{"created_from", store.EventListParams{CreatedFrom: &t1}, seqRange(3, 6)},
		{"created_before", store.EventListParams{CreatedBefore: &t2}, seqRange(1, 4)},
		{"created_to", store.EventListParams{CreatedTo: &t1}, seqRange(1, 4)},
		{"window", store.EventListParams{CreatedAfter: &t0, CreatedBefore: &t2}, seqRange(3, 4)},
		{"window desc", store.EventListParams{CreatedFrom: &t0, CreatedTo: &t1, Desc: true}, seqRange(4, 1)},
		{"time and seq", store.EventListParams{CreatedFrom: &t1, AfterSeq: 3}, seqRange(4, 6)},
	} {
		p := tc.p
		p.SessionID, p.Limit = sess.ID, 100
		got, err := s.EventList(ctxBg, &p)
		must(t, err, tc.name)
		equalSeqs(t, got, tc.want, tc.name)
	}
}

func testConcurrentAppendsOneSession(t *testing.T, h Harness) {
	s := h.open(t)
	sess := createSession(t, s)
	const writers, rounds = 16, 20
	got := concurrentAppends(t, s, []string{sess.ID}, writers, rounds)
	events := allEvents(t, s, sess.ID)
	checkContiguous(t, events)
	equal(t, len(events), got[sess.ID], "events stored = events acknowledged")
}

func testConcurrentAppendsManySessions(t *testing.T, h Harness) {
	s := h.open(t)
	var ids []string
	for range 8 {
		ids = append(ids, createSession(t, s).ID)
	}
	got := concurrentAppends(t, s, ids, 4, 15)
	for _, id := range ids {
		events := allEvents(t, s, id)
		checkContiguous(t, events)
		equal(t, len(events), got[id], "events stored = events acknowledged")
	}
}

// concurrentAppends runs writers goroutines per session, each appending rounds times (alternating single events
// and batches of 3), checks each acknowledgement's seqs are contiguous and returns the events acknowledged per
// session.
func concurrentAppends(t *testing.T, s store.Store, sessionIDs []string, writers, rounds int) map[string]int {
	var mu sync.Mutex
	acked := map[string]int{}
	seen := map[string]map[int64]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, len(sessionIDs)*writers)
	for _, id := range sessionIDs {
		seen[id] = map[int64]bool{} // before any writer starts: writers read seen under mu
	}
	for _, id := range sessionIDs {
		for w := range writers {
			wg.Go(func() {
				for r := range rounds {
					n := 1 + 2*(r%2)
					batch := make([]apitype.NewEvent, n)
					for i := range batch {
						batch[i] = agentMessage("w" + strconv.Itoa(w) + "r" + strconv.Itoa(r))
					}
					events, err := s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: id, Events: batch})
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					for i, e := range events {
						if e.Seq != events[0].Seq+int64(i) || seen[id][e.Seq] {
							mu.Unlock()
							errs <- fmt.Errorf("acknowledged seq %d not contiguous or seen twice", e.Seq)
							return
						}
						seen[id][e.Seq] = true
					}
					acked[id] += len(events)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent append: %v", err)
	}
	return acked
}

func testExpectedSeqRace(t *testing.T, h Harness) {
	s := h.open(t)
	sess := createSession(t, s, userMessage("start"))
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, errs[i] = s.EventAppend(ctxBg, &store.EventAppendParams{
				SessionID: sess.ID, ExpectedSeq: 2, Events: []apitype.NewEvent{agentMessage(strconv.Itoa(i))},
			})
		})
	}
	wg.Wait()
	wins := 0
	for i, err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, store.ErrConflict):
			t.Fatalf("appender %d: got %v, want nil or ErrConflict", i, err)
		}
	}
	equal(t, wins, 1, "appends that got seq 2")
	equalSeqs(t, allEvents(t, s, sess.ID), []int64{1, 2}, "log")
}

func testSubscribe(t *testing.T, h Harness) {
	s := h.open(t)
	sess := createSession(t, s)
	other := createSession(t, s)
	ch, stop := s.Subscribe(sess.ID)
	defer stop()
	otherCh, stopOther := s.Subscribe(other.ID)
	defer stopOther()

	go func() {
		_, _ = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Events: []apitype.NewEvent{
			userMessage("wake up"),
		}})
	}()
	waitSignal(t, ch, "subscriber woken by an append")
	// The append is visible once the subscriber is woken.
	deadline := time.Now().Add(5 * time.Second)
	for len(allEvents(t, s, sess.ID)) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("woken subscriber does not see the event")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case <-otherCh:
		t.Fatal("another session's subscriber was woken")
	default:
	}

	// Coalesced: many appends, at least one signal, no blocking.
	for i := range 5 {
		appendEvents(t, s, sess.ID, agentMessage(strconv.Itoa(i)))
	}
	waitSignal(t, ch, "subscriber woken by more appends")

	// After stop, no more signals.
	stop()
	drain(ch)
	appendEvents(t, s, sess.ID, agentMessage("after stop"))
	select {
	case <-ch:
		t.Fatal("signal after the subscription ended")
	case <-time.After(20 * time.Millisecond):
	}
}

// testFailedAppendsInGroup runs appends that fail (unknown session, wrong expected seq, lost lease) alongside
// appends that succeed, concurrently, so that a batching adapter groups them: each fails or succeeds on its own.
func testFailedAppendsInGroup(t *testing.T, h Harness) {
	s := h.open(t)
	good := createSession(t, s)
	leased := createSession(t, s, userMessage("go"))
	l, err := claim(s, "brain", time.Minute, leased.ID)
	must(t, err, "claim")
	stale := *l
	stale.Token = "stale"

	const rounds = 20
	var wg sync.WaitGroup
	errs := make(chan error, 4*rounds)
	for i := range rounds {
		wg.Go(func() {
			_, err := s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: good.ID,
				Events: []apitype.NewEvent{agentMessage(strconv.Itoa(i)), agentMessage("b")}})
			if err != nil {
				errs <- fmt.Errorf("good append: %w", err)
			}
		})
		wg.Go(func() {
			_, err := s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: "sesn_missing",
				Events: []apitype.NewEvent{agentMessage("x")}})
			if !errors.Is(err, store.ErrNotFound) {
				errs <- fmt.Errorf("append to unknown session: got %v, want ErrNotFound", err)
			}
		})
		wg.Go(func() {
			_, err := s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: good.ID, ExpectedSeq: 1_000_000,
				Events: []apitype.NewEvent{agentMessage("x")}})
			if !errors.Is(err, store.ErrConflict) {
				errs <- fmt.Errorf("append with a wrong expected seq: got %v, want ErrConflict", err)
			}
		})
		wg.Go(func() {
			_, err := s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: leased.ID, Lease: &stale,
				Events: []apitype.NewEvent{agentMessage("x")}})
			if !errors.Is(err, store.ErrLeaseLost) {
				errs <- fmt.Errorf("append with a stale lease: got %v, want ErrLeaseLost", err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	events := allEvents(t, s, good.ID)
	checkContiguous(t, events)
	equal(t, len(events), 2*rounds, "events of the good appends")
	equalSeqs(t, allEvents(t, s, leased.ID), []int64{1}, "the leased session's log")
}
