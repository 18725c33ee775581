package storetest

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

func testSessionCreate(t *testing.T, h Harness) {
	s := h.open(t)
	in := newSession("agent_x", 3, base)
	title := "a title"
	in.Title = &title
	before := apitype.Now()
	sess, events, err := s.SessionCreate(ctxBg, &store.SessionCreateParams{
		Session:       in,
		InitialEvents: []apitype.NewEvent{userMessage("one"), userMessage("two"), agentMessage("three")},
	})
	must(t, err, "create session")
	equal(t, sess.ID, in.ID, "id")
	equal(t, sess.Status, apitype.StatusIdle, "status")
	equal(t, len(events), 3, "initial events")
	checkContiguous(t, events)
	for _, e := range events {
		if !strings.HasPrefix(e.ID, apitype.PrefixEvent) {
			t.Fatalf("event id %q lacks prefix %q", e.ID, apitype.PrefixEvent)
		}
		equal(t, e.SessionID, in.ID, "event session id")
		if e.CreatedAt.Before(before) {
			t.Fatalf("created_at %v before the call (%v)", e.CreatedAt, before)
		}
	}
	if events[0].ProcessedAt != nil {
		t.Fatalf("client event processed at %v", events[0].ProcessedAt)
	}
	if events[2].ProcessedAt == nil {
		t.Fatal("server event not processed")
	}
	equalSeqs(t, allEvents(t, s, in.ID), []int64{1, 2, 3}, "stored initial events")

	got, err := s.SessionGet(ctxBg, in.ID)
	must(t, err, "get session")
	equal(t, got.ID, in.ID, "id")
	equal(t, *got.Title, title, "title")
	equal(t, got.Agent.ID, "agent_x", "agent id")
	equal(t, got.Agent.Version, 3, "agent version")
	equal(t, got.Metadata["k"], "v", "metadata")
	equal(t, got.Status, apitype.StatusIdle, "status")
	sameTime(t, got.CreatedAt, base, "created_at")
	sameSession(t, sess, got, "created with events")

	// The initial events made it runnable.
	l, err := claim(s, "brain", time.Minute, in.ID)
	must(t, err, "claim session created with events")
	equal(t, l.SessionID, in.ID, "claimed session")

	// Without initial events it is not runnable.
	quiet, events, err := s.SessionCreate(ctxBg, &store.SessionCreateParams{Session: newSession("agent_x", 1, base)})
	must(t, err, "create session without events")
	equal(t, len(events), 0, "no initial events")
	gotQuiet, err := s.SessionGet(ctxBg, quiet.ID)
	must(t, err, "get session created without events")
	sameSession(t, quiet, gotQuiet, "created without events")
	_, err = s.LeaseClaim(ctxBg, &store.LeaseClaimParams{Owner: "brain", TTL: time.Minute, SessionID: quiet.ID})
	mustIs(t, err, store.ErrNoWork, "claim session created without events")

	_, _, err = s.SessionCreate(ctxBg, &store.SessionCreateParams{Session: in})
	mustIs(t, err, store.ErrConflict, "create duplicate session")
	_, err = s.SessionGet(ctxBg, "sesn_missing")
	mustIs(t, err, store.ErrNotFound, "get unknown session")
}

// sameSession fails unless SessionCreate returned the session as SessionGet reads it, as the API would encode
// both.
func sameSession(t *testing.T, created, got *apitype.Session, what string) {
	t.Helper()
	a, err := json.Marshal(created)
	must(t, err, what+": encode")
	b, err := json.Marshal(got)
	must(t, err, what+": encode")
	if string(a) != string(b) {
		t.Fatalf("%s: SessionCreate returned\n%s\nSessionGet reads\n%s", what, a, b)
	}
}

func testSessionUpdate(t *testing.T, h Harness) {
	s := h.open(t)
	sess := createSession(t, s)
	_, err := s.EventAppend(ctxBg, &store.EventAppendParams{
		SessionID: sess.ID, Status: apitype.StatusRunning,
		Usage: &apitype.SessionUsage{InputTokens: 10, OutputTokens: 5},
	})
	must(t, err, "set status")

	title := "renamed"
	updated, err := s.SessionUpdate(ctxBg, sess.ID, func(s *apitype.Session) error {
		equal(t, s.Status, apitype.StatusRunning, "fn sees the current status")
		s.Title = &title
		s.Metadata = map[string]string{"new": "1"}
		return nil
	})
	must(t, err, "update session")
	equal(t, *updated.Title, title, "returned title")
	equal(t, updated.Status, apitype.StatusRunning, "returned status")

	got, err := s.SessionGet(ctxBg, sess.ID)
	must(t, err, "get session")
	equal(t, *got.Title, title, "stored title")
	equal(t, got.Metadata["new"], "1", "stored metadata")
	equal(t, got.Status, apitype.StatusRunning, "an update keeps the status")
	equal(t, got.Usage.InputTokens, 10, "an update keeps the usage")

	errFn := errors.New("refused")
	_, err = s.SessionUpdate(ctxBg, sess.ID, func(s *apitype.Session) error {
		s.Metadata = map[string]string{"lost": "1"}
		return errFn
	})
	mustIs(t, err, errFn, "update fn error is returned")
	got, err = s.SessionGet(ctxBg, sess.ID)
	must(t, err, "get session")
	equal(t, got.Metadata["new"], "1", "failed update stores nothing")
	_, err = s.SessionUpdate(ctxBg, "sesn_missing", func(*apitype.Session) error { return nil })
	mustIs(t, err, store.ErrNotFound, "update unknown session")
}

func testSessionList(t *testing.T, h Harness) {
	s := h.open(t)
	type spec struct {
		agent      string
		version    int
		status     string
		archived   bool
		deployment string
	}
	specs := []spec{
		{"agent_a", 1, apitype.StatusIdle, false, "depl_a"},
		{"agent_a", 2, apitype.StatusRunning, false, ""},
		{"agent_b", 1, apitype.StatusIdle, false, "depl_b"},
		{"agent_a", 2, apitype.StatusTerminated, true, "depl_a"},
		{"agent_b", 1, apitype.StatusRunning, false, "depl_a"},
	}
	ids := make([]string, len(specs))
	for i, sp := range specs {
		in := newSession(sp.agent, sp.version, base.Add(time.Duration(i)*time.Second))
		if sp.deployment != "" {
			in.DeploymentID = &sp.deployment
		}
		_, _, err := s.SessionCreate(ctxBg, &store.SessionCreateParams{Session: in})
		must(t, err, "create session")
		ids[i] = in.ID
		if sp.status != apitype.StatusIdle {
			_, err := s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: in.ID, Status: sp.status})
			must(t, err, "set status")
		}
		if sp.archived {
			at := base.Add(time.Hour)
			_, err := s.SessionUpdate(ctxBg, in.ID, func(s *apitype.Session) error {
				s.ArchivedAt = &at
				return nil
			})
			must(t, err, "archive session")
		}
	}
	pick := func(is ...int) string {
		out := make([]string, len(is))
		for i, x := range is {
			out[i] = ids[x]
		}
		return strings.Join(out, ",")
	}
	t1 := base.Add(time.Second)
	for _, tc := range []struct {
		name string
		p    store.SessionListParams
		want string
	}{
		{"all", store.SessionListParams{}, pick(0, 1, 2, 4)},
		{"include archived", store.SessionListParams{ListParams: store.ListParams{IncludeArchived: true}},
			pick(0, 1, 2, 3, 4)},
		{"agent", store.SessionListParams{AgentID: "agent_a"}, pick(0, 1)},
		{"agent version", store.SessionListParams{AgentID: "agent_a", AgentVersion: 2,
			ListParams: store.ListParams{IncludeArchived: true}}, pick(1, 3)},
		{"status", store.SessionListParams{Statuses: []string{apitype.StatusRunning}}, pick(1, 4)},
		{"statuses", store.SessionListParams{Statuses: []string{apitype.StatusRunning, apitype.StatusTerminated},
			ListParams: store.ListParams{IncludeArchived: true}}, pick(1, 3, 4)},
		{"desc limit", store.SessionListParams{ListParams: store.ListParams{Desc: true, Limit: 2}}, pick(4, 2)},
		{"cursor", store.SessionListParams{ListParams: store.ListParams{
			After: &store.Cursor{CreatedAt: t1, ID: ids[1]}}}, pick(2, 4)},
		{"created after", store.SessionListParams{ListParams: store.ListParams{CreatedAfter: &t1}}, pick(2, 4)},
		{"deployment", store.SessionListParams{DeploymentID: "depl_a"}, pick(0, 4)},
		{"deployment with archived", store.SessionListParams{DeploymentID: "depl_a",
			ListParams: store.ListParams{IncludeArchived: true}}, pick(0, 3, 4)},
		{"deployment and agent", store.SessionListParams{DeploymentID: "depl_a", AgentID: "agent_b"}, pick(4)},
		{"unknown deployment", store.SessionListParams{DeploymentID: "depl_none"}, ""},
	} {
		p := tc.p
		if p.Limit == 0 {
			p.Limit = 10
		}
		list, err := s.SessionList(ctxBg, &p)
		must(t, err, tc.name)
		got := make([]string, len(list))
		for i, sess := range list {
			got[i] = sess.ID
		}
		equal(t, strings.Join(got, ","), tc.want, tc.name)
	}
	list, err := s.SessionList(ctxBg, &store.SessionListParams{AgentID: "agent_a", AgentVersion: 2,
		ListParams: store.ListParams{Limit: 10}})
	must(t, err, "list")
	equal(t, len(list), 1, "sessions")
	equal(t, list[0].Status, apitype.StatusRunning, "listed status is the store's")
}

// testSessionState: SessionState agrees with SessionGet on status and archive time as they change,
// and a missing session is ErrNotFound.
func testSessionState(t *testing.T, h Harness) {
	s := h.open(t)
	sess := createSession(t, s)
	check := func(what string) {
		t.Helper()
		st, err := s.SessionState(ctxBg, sess.ID)
		must(t, err, what+": state")
		got, err := s.SessionGet(ctxBg, sess.ID)
		must(t, err, what+": get")
		equal(t, st.ID, got.ID, what+": id")
		equal(t, st.Status, got.Status, what+": status")
		if (st.ArchivedAt == nil) != (got.ArchivedAt == nil) || st.ArchivedAt != nil && !st.ArchivedAt.Equal(*got.ArchivedAt) {
			t.Fatalf("%s: archived_at %v, SessionGet says %v", what, st.ArchivedAt, got.ArchivedAt)
		}
	}
	check("new")
	_, err := s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Status: apitype.StatusRunning})
	must(t, err, "running")
	check("running")
	at := base.Add(time.Hour)
	_, err = s.SessionUpdate(ctxBg, sess.ID, func(in *apitype.Session) error { in.ArchivedAt = &at; return nil })
	must(t, err, "archive")
	check("archived")
	st, err := s.SessionState(ctxBg, sess.ID)
	must(t, err, "state")
	if st.Status != apitype.StatusRunning || st.ArchivedAt == nil {
		t.Fatalf("state after archive = %+v", st)
	}
	must(t, s.SessionDelete(ctxBg, sess.ID), "delete")
	if _, err := s.SessionState(ctxBg, sess.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted session's state: %v, want ErrNotFound", err)
	}
}

// testEventAppendOpen: an append with Open is refused with ErrSessionClosed once the session is archived or
// terminated, in the same write, without failing the appends beside it; one without Open (a brain's) is not.
func testEventAppendOpen(t *testing.T, h Harness) {
	s := h.open(t)
	open := func(id string) error {
		_, err := s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: id, Open: true, Wake: true,
			Events: []apitype.NewEvent{userMessage("hi")}})
		return err
	}
	live, archived, terminated := createSession(t, s), createSession(t, s), createSession(t, s)
	for _, sess := range []*apitype.Session{live, archived, terminated} {
		must(t, open(sess.ID), "append to an open session")
	}
	at := base.Add(time.Hour)
	_, err := s.SessionUpdate(ctxBg, archived.ID, func(in *apitype.Session) error { in.ArchivedAt = &at; return nil })
	must(t, err, "archive")
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: terminated.ID, Status: apitype.StatusTerminated,
		Events: []apitype.NewEvent{{Type: apitype.EventSessionStatusTerminated, Processed: true}}})
	must(t, err, "terminate")

	// At once, so that a group commit holds them together.
	errs := make([]error, 12)
	var wg sync.WaitGroup
	for i := range errs {
		id := []string{live.ID, archived.ID, terminated.ID}[i%3]
		wg.Go(func() { errs[i] = open(id) })
	}
	wg.Wait()
	for i, err := range errs {
		if i%3 == 0 && err != nil {
			t.Errorf("append %d to the open session: %v", i, err)
		}
		if i%3 != 0 && !errors.Is(err, store.ErrSessionClosed) {
			t.Errorf("append %d to a closed session: %v, want ErrSessionClosed", i, err)
		}
	}
	equalSeqs(t, allEvents(t, s, live.ID), []int64{1, 2, 3, 4, 5}, "the open session's log")
	equalSeqs(t, allEvents(t, s, archived.ID), []int64{1}, "the archived session's log")
	equalSeqs(t, allEvents(t, s, terminated.ID), []int64{1, 2}, "the terminated session's log")
	if err := open(apitype.NewID(apitype.PrefixSession)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("append to no session: %v, want ErrNotFound", err)
	}
	// A brain's append, without Open, still goes in (its last write after the end).
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: terminated.ID,
		Events: []apitype.NewEvent{agentMessage("late")}})
	must(t, err, "append without Open to a terminated session")
}

func testSessionDelete(t *testing.T, h Harness) {
	s := h.open(t)
	in := newSession("agent_x", 1, base)
	_, _, err := s.SessionCreate(ctxBg, &store.SessionCreateParams{
		Session: in, InitialEvents: []apitype.NewEvent{userMessage("hi")},
	})
	must(t, err, "create session")
	appendEvents(t, s, in.ID, agentMessage("a"), agentMessage("b"))
	other := createSession(t, s, userMessage("other"))

	ch, stop := s.Subscribe(in.ID)
	defer stop()
	must(t, s.SessionDelete(ctxBg, in.ID), "delete session")
	waitSignal(t, ch, "subscriber woken by delete")

	_, err = s.SessionGet(ctxBg, in.ID)
	mustIs(t, err, store.ErrNotFound, "get deleted session")
	_, err = s.EventList(ctxBg, &store.EventListParams{SessionID: in.ID, Limit: 10})
	mustIs(t, err, store.ErrNotFound, "list events of deleted session")
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: in.ID, Events: []apitype.NewEvent{
		userMessage("late"),
	}})
	mustIs(t, err, store.ErrNotFound, "append to deleted session")
	mustIs(t, s.SessionDelete(ctxBg, in.ID), store.ErrNotFound, "delete again")
	equalSeqs(t, allEvents(t, s, other.ID), []int64{1}, "other session's log untouched")

	// Its events are gone: a new session with the same id starts an empty log.
	_, events, err := s.SessionCreate(ctxBg, &store.SessionCreateParams{Session: in})
	must(t, err, "recreate session with the same id")
	equal(t, len(events), 0, "no initial events")
	equal(t, len(allEvents(t, s, in.ID)), 0, "events of the deleted session")
	got := appendEvents(t, s, in.ID, userMessage("again"))
	equal(t, got[0].Seq, 1, "first seq after recreate")
}
