package harness_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/store"
)

const terminated = apitype.EventSessionStatusTerminated

// archive archives a session the way the API does: archived_at set, then session.status_terminated appended.
// Without terminate, only archived_at is set (a session archived before archiving terminated sessions).
func (f *fixture) archive(sessionID string, terminate bool) {
	f.t.Helper()
	ctx := context.Background()
	now := apitype.Now()
	if _, err := f.store.SessionUpdate(ctx, sessionID, func(s *apitype.Session) error {
		s.ArchivedAt = &now
		return nil
	}); err != nil {
		f.t.Fatal(err)
	}
	if terminate {
		if _, err := f.store.EventAppend(ctx, &store.EventAppendParams{SessionID: sessionID,
			Events: []apitype.NewEvent{mustEvent(f.t, terminated)}, Status: apitype.StatusTerminated}); err != nil {
			f.t.Fatal(err)
		}
	}
}

func mustEvent(t *testing.T, typ apitype.EventType) apitype.NewEvent {
	t.Helper()
	ev, err := apitype.MakeEvent(typ, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// releaseWatch reports every lease release the brain makes.
type releaseWatch struct {
	store.Store
	released chan string
}

func (s *releaseWatch) LeaseRelease(ctx context.Context, l *store.Lease) error {
	err := s.Store.LeaseRelease(ctx, l)
	if err == nil {
		s.released <- l.SessionID
	}
	return err
}

// startWatched starts a brain whose lease releases w reports.
func (f *fixture) startWatched() *releaseWatch {
	w := &releaseWatch{Store: f.store, released: make(chan string, 100)}
	cfg := f.config()
	cfg.Store = w
	f.start(cfg)
	return w
}

// waitHandled waits until the brain released the session, and checks that it is not runnable: the brain
// looked at it and counted its wake-ups as handled.
func (w *releaseWatch) waitHandled(t *testing.T, sessionID string) {
	t.Helper()
	timeout := time.After(15 * time.Second)
	for {
		select {
		case id := <-w.released:
			if id != sessionID {
				continue
			}
			_, err := w.Store.LeaseClaim(context.Background(), &store.LeaseClaimParams{Owner: "probe",
				TTL: time.Minute, SessionID: sessionID})
			if !errors.Is(err, store.ErrNoWork) {
				t.Fatalf("after the brain released the session, a claim got %v; want ErrNoWork", err)
			}
			return
		case <-timeout:
			t.Fatal("the brain never released the session")
		}
	}
}

// TestArchivedSessionRunsNoTurn: a message that reaches an archived session's log (sent just before the archive,
// or by a client that bypassed the API's check) gets no turn, whether or not the archive terminated the session.
func TestArchivedSessionRunsNoTurn(t *testing.T) {
	t.Parallel()
	for _, terminate := range []bool{true, false} {
		f := newFixture(t)
		f.srv.Script(modeltest.Turn{Text: "I should never be asked."})
		id := f.session()
		f.archive(id, terminate)
		f.say(id, "hello?")
		f.startWatched().waitHandled(t, id)
		if n := len(f.srv.Requests()); n != 0 {
			t.Errorf("terminate=%v: %d model requests for an archived session", terminate, n)
		}
		want := []apitype.EventType{terminated, userMsg}
		if !terminate {
			want = want[1:]
		}
		evs := f.events(id)
		assertTypes(t, evs, want...)
		sess, err := f.store.SessionGet(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if wantStatus := map[bool]string{true: apitype.StatusTerminated, false: apitype.StatusIdle}[terminate]; sess.Status != wantStatus {
			t.Errorf("terminate=%v: status %s, want %s", terminate, sess.Status, wantStatus)
		}
	}
}

// TestArchiveMidTurnStopsTheTurn: archiving a session whose model call is streaming cancels the call, ends its
// span, and nothing more runs; the session stays terminated.
func TestArchiveMidTurnStopsTheTurn(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	hold := make(chan struct{})
	defer close(hold)
	f.srv.Script(modeltest.Turn{Text: "A long answer that never finishes", Hold: hold},
		modeltest.Turn{Text: "I should never be asked."})
	w := &releaseWatch{Store: f.store, released: make(chan string, 100)}
	cfg := f.config()
	cfg.Store, cfg.PreviewInterval = w, 5*time.Millisecond
	f.start(cfg)
	id := f.session()
	ch, unsubscribe := f.store.PreviewSubscribe(id)
	defer unsubscribe()
	f.say(id, "tell me everything")
	waitTextPreview(t, ch)
	f.archive(id, true)
	evs := f.waitFor(id, "the call's span closed", func(evs []apitype.Event) bool { return evs[len(evs)-1].Type == end })
	// What the model said before the archive is recorded, as after an interrupt.
	assertTypes(t, evs, userMsg, running, start, terminated, agentMsg, end)
	if span := decode[apitype.SpanModelRequestEnd](t, evs[5]); !span.IsError {
		t.Errorf("span end = %+v, want is_error", span)
	}
	w.waitHandled(t, id)
	time.Sleep(50 * time.Millisecond) // nothing more may come
	assertTypes(t, f.events(id), userMsg, running, start, terminated, agentMsg, end)
	if n := len(f.srv.Requests()); n != 1 {
		t.Errorf("%d model requests, want 1", n)
	}
	sess, err := f.store.SessionGet(context.Background(), id)
	if err != nil || sess.Status != apitype.StatusTerminated {
		t.Fatalf("session status %v, %v; want terminated", sess.Status, err)
	}
}

// TestTerminalErrorTerminates: a model error no retry can mend (billing: the account cannot pay) is reported
// with retry_status terminal, and the session goes terminated (session.status_terminated), as the spec says of
// terminal errors; a later message runs no turn. Before, it idled with retries_exhausted like any other error.
func TestTerminalErrorTerminates(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.Script(modeltest.Turn{Err: &modeltest.ErrorReply{Status: 402, Type: "billing_error", Message: "credit balance too low"}},
		modeltest.Turn{Text: "must not be asked"})
	f.start(f.config())
	id := f.session()
	f.say(id, "hi")
	evs := f.waitFor(id, "terminated", func(evs []apitype.Event) bool { return evs[len(evs)-1].Type == terminated })
	assertTypes(t, evs, userMsg, running, start, end, sessErr, terminated)
	e := decode[apitype.SessionError](t, evs[4]).Error
	if e.Type != apitype.SessionErrBilling || e.RetryStatus.Type != apitype.RetryStatusTerminal || !strings.Contains(e.Message, "bill") {
		t.Errorf("session.error = %+v", e)
	}
	sess, err := f.store.SessionGet(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if sess.Status != apitype.StatusTerminated {
		t.Errorf("status = %s, want terminated", sess.Status)
	}
	// Terminated is final: a message that reaches the log anyway gets no turn.
	f.say(id, "again")
	f.waitRequests(1)
	time.Sleep(300 * time.Millisecond)
	if n := len(f.srv.Requests()); n != 1 {
		t.Errorf("%d model requests after termination, want 1", n)
	}
}
