package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// Multi-agent sessions (issue 22): the events of a session's threads in one log, and its threads.

// threadEvent is an agent message of a thread ("" the primary), cross-posted or not.
func threadEvent(thread string, crossPost bool, text string) apitype.NewEvent {
	e := agentMessage(text)
	e.Thread, e.CrossPost = thread, crossPost
	return e
}

// newThreadID makes a session thread id.
func newThreadID() string { return apitype.NewID(apitype.PrefixThread) }

// scopeModel is EventList's scope and filters, computed over the whole log in memory: what a list must return.
func scopeModel(log []apitype.Event, p *store.EventListParams) []int64 {
	var out []int64
	size := 0
	pick := func(e apitype.Event) bool {
		switch p.Scope {
		case store.ScopeSession:
			if e.Thread != "" && !e.CrossPost {
				return false
			}
		case store.ScopeThread:
			if e.Thread != p.Thread {
				return false
			}
		}
		if e.Seq <= p.AfterSeq || p.BeforeSeq > 0 && e.Seq >= p.BeforeSeq {
			return false
		}
		return len(p.Types) == 0 || slices.Contains(p.Types, e.Type)
	}
	events := slices.Clone(log)
	if p.Desc {
		slices.Reverse(events)
	}
	for _, e := range events {
		if len(out) == p.Limit || p.MaxBytes > 0 && size >= p.MaxBytes {
			break
		}
		if pick(e) {
			out = append(out, e.Seq)
			size += len(e.Data)
		}
	}
	return out
}

// testThreadEventScopes: events carry their thread and cross-post flag; EventList reads the session's stream
// (the primary's events and the cross-posted ones), one thread's events, or every event, with every other
// filter, whether the log is read from the database or from what an adapter keeps of a followed session.
func testThreadEventScopes(t *testing.T, h Harness) {
	s := h.open(t)
	sess := createSession(t, s)
	a, b := newThreadID(), newThreadID()
	status := func(thread string, crossPost bool) apitype.NewEvent {
		return apitype.NewEvent{Type: apitype.EventSessionThreadStatusIdle, Processed: true, Thread: thread, CrossPost: crossPost,
			Data: []byte(fmt.Sprintf(`{"session_thread_id":%q,"agent_name":"worker"}`, thread))}
	}
	batches := [][]apitype.NewEvent{
		{userMessage("go"), threadEvent("", false, "primary 2")},
		{threadEvent(a, false, "a 3"), threadEvent(a, true, "a 4, cross-posted")},
		{threadEvent(b, false, "b 5")},
		{threadEvent("", false, "primary 6"), status(b, true), threadEvent(a, false, "a 8")},
	}
	var log []apitype.Event
	for _, batch := range batches {
		got := appendEvents(t, s, sess.ID, batch...)
		for i, e := range got {
			equal(t, e.Thread, batch[i].Thread, fmt.Sprintf("appended event %d's thread", e.Seq))
			equal(t, e.CrossPost, batch[i].CrossPost, fmt.Sprintf("appended event %d's cross-post", e.Seq))
		}
		log = append(log, got...)
	}
	checkContiguous(t, log)

	// Every event, as stored.
	all, err := s.EventList(ctxBg, &store.EventListParams{SessionID: sess.ID, Scope: store.ScopeAll, Limit: 100})
	must(t, err, "list every thread's events")
	equal(t, len(all), len(log), "events of every thread")
	for i, e := range all {
		equal(t, e.ID, log[i].ID, "id")
		equal(t, e.Thread, log[i].Thread, fmt.Sprintf("event %d's thread", e.Seq))
		equal(t, e.CrossPost, log[i].CrossPost, fmt.Sprintf("event %d's cross-post", e.Seq))
		got, err := s.EventGet(ctxBg, sess.ID, e.ID)
		must(t, err, "get event")
		equal(t, got.Thread, log[i].Thread, fmt.Sprintf("event %d's thread (get)", e.Seq))
		equal(t, got.CrossPost, log[i].CrossPost, fmt.Sprintf("event %d's cross-post (get)", e.Seq))
	}

	// The scopes, spelled out once.
	list := func(p store.EventListParams) []apitype.Event {
		t.Helper()
		p.SessionID = sess.ID
		if p.Limit == 0 {
			p.Limit = 100
		}
		got, err := s.EventList(ctxBg, &p)
		must(t, err, "list events")
		return got
	}
	equalSeqs(t, list(store.EventListParams{}), []int64{1, 2, 4, 6, 7}, "the session's stream (zero scope)")
	equalSeqs(t, list(store.EventListParams{Scope: store.ScopeThread}), []int64{1, 2, 6}, "the primary thread's own events")
	equalSeqs(t, list(store.EventListParams{Scope: store.ScopeThread, Thread: a}), []int64{3, 4, 8}, "thread a's events")
	equalSeqs(t, list(store.EventListParams{Scope: store.ScopeThread, Thread: b}), []int64{5, 7}, "thread b's events")
	equalSeqs(t, list(store.EventListParams{Scope: store.ScopeThread, Thread: newThreadID()}), nil, "an unknown thread's events")
	equalSeqs(t, list(store.EventListParams{Types: []apitype.EventType{apitype.EventAgentMessage}}), []int64{2, 4, 6},
		"the session's stream's agent messages")
	equalSeqs(t, list(store.EventListParams{Scope: store.ScopeThread, Thread: b, Types: []apitype.EventType{apitype.EventAgentMessage}}),
		[]int64{5}, "thread b's agent messages")
	equalSeqs(t, list(store.EventListParams{Scope: store.ScopeAll, Types: []apitype.EventType{apitype.EventSessionThreadStatusIdle}}),
		[]int64{7}, "every thread's status events")

	// Every scope with every other filter, against the model.
	check := func(stage string) {
		t.Helper()
		scopes := []struct {
			scope  store.EventScope
			thread string
		}{{store.ScopeSession, ""}, {store.ScopeThread, ""}, {store.ScopeThread, a}, {store.ScopeThread, b}, {store.ScopeAll, ""}}
		filters := []store.EventListParams{
			{Limit: 100},
			{Limit: 2},
			{AfterSeq: 3, Limit: 100},
			{AfterSeq: 3, Limit: 1},
			{AfterSeq: 4, Types: []apitype.EventType{apitype.EventAgentMessage}, Limit: 100},
			{BeforeSeq: 8, Desc: true, Limit: 100},
			{BeforeSeq: 8, Desc: true, Limit: 2},
			{AfterSeq: 1, BeforeSeq: 7, Limit: 100},
			{Desc: true, Limit: 100},
			{MaxBytes: 1, Limit: 100},
			{AfterSeq: 2, MaxBytes: 60, Limit: 100},
			{Types: []apitype.EventType{apitype.EventUserMessage, apitype.EventSessionThreadStatusIdle}, Limit: 100},
		}
		for _, sc := range scopes {
			for _, f := range filters {
				p := f
				p.SessionID, p.Scope, p.Thread = sess.ID, sc.scope, sc.thread
				got, err := s.EventList(ctxBg, &p)
				must(t, err, "list events")
				if want := scopeModel(log, &p); !slices.Equal(seqs(got), want) {
					t.Fatalf("%s: scope %d thread %q, %+v: seqs %v, want %v", stage, sc.scope, sc.thread, f, seqs(got), want)
				}
				for _, e := range got {
					equal(t, e.Thread, log[e.Seq-1].Thread, "listed event's thread")
					equal(t, e.CrossPost, log[e.Seq-1].CrossPost, "listed event's cross-post")
				}
			}
		}
		// The time filters keep the scope: the stream from the last batch's time on.
		from := log[len(log)-1].CreatedAt
		p := &store.EventListParams{SessionID: sess.ID, CreatedFrom: &from, Limit: 100}
		got, err := s.EventList(ctxBg, p)
		must(t, err, "list events by time")
		var want []int64
		for _, e := range log {
			if !e.CreatedAt.Before(from) && (e.Thread == "" || e.CrossPost) {
				want = append(want, e.Seq)
			}
		}
		equalSeqs(t, got, want, stage+": the stream by time")
	}
	check("read from the log")

	// Following the session (an adapter may keep its newest events in memory): new events of every thread, read
	// as they come.
	_, stop := s.Subscribe(sess.ID)
	defer stop()
	more := appendEvents(t, s, sess.ID, threadEvent(b, false, "b 9"), threadEvent("", false, "primary 10"),
		threadEvent(a, true, "a 11, cross-posted"), userMessage("12"))
	log = append(log, more...)
	more = appendEvents(t, s, sess.ID, threadEvent(a, false, "a 13"))
	log = append(log, more...)
	check("followed")
	for _, sc := range []struct {
		scope  store.EventScope
		thread string
		want   []int64
	}{
		{store.ScopeSession, "", []int64{10, 11, 12}},
		{store.ScopeThread, "", []int64{10, 12}},
		{store.ScopeThread, a, []int64{11, 13}},
		{store.ScopeThread, b, []int64{9}},
		{store.ScopeAll, "", []int64{9, 10, 11, 12, 13}},
	} {
		got, err := s.EventList(ctxBg, &store.EventListParams{SessionID: sess.ID, Scope: sc.scope, Thread: sc.thread, AfterSeq: 8, Limit: 100})
		must(t, err, "list new events")
		equalSeqs(t, got, sc.want, fmt.Sprintf("new events, scope %d thread %q", sc.scope, sc.thread))
	}

	// A single-agent session's events are all the primary's, none cross-posted, in every scope.
	single := createSession(t, s, userMessage("hi"))
	appendEvents(t, s, single.ID, agentMessage("hello"))
	for _, sc := range []store.EventScope{store.ScopeSession, store.ScopeThread, store.ScopeAll} {
		got, err := s.EventList(ctxBg, &store.EventListParams{SessionID: single.ID, Scope: sc, Limit: 10})
		must(t, err, "list a single-agent session")
		equalSeqs(t, got, []int64{1, 2}, fmt.Sprintf("single-agent session, scope %d", sc))
		for _, e := range got {
			if e.Thread != "" || e.CrossPost {
				t.Fatalf("single-agent session: event %d has thread %q, cross-post %v", e.Seq, e.Thread, e.CrossPost)
			}
		}
	}
	// An unknown session is not found in any scope.
	for _, sc := range []store.EventScope{store.ScopeSession, store.ScopeThread, store.ScopeAll} {
		_, err := s.EventList(ctxBg, &store.EventListParams{SessionID: "sesn_missing", Scope: sc, Thread: a, Limit: 10})
		mustIs(t, err, store.ErrNotFound, fmt.Sprintf("list an unknown session, scope %d", sc))
	}
}

// newThread is a session thread as a brain would create it.
func newThread(sessionID string, parent *string, name string, created time.Time) apitype.SessionThread {
	return apitype.SessionThread{
		Type:           apitype.ObjectSessionThread,
		ID:             newThreadID(),
		SessionID:      sessionID,
		ParentThreadID: parent,
		Status:         apitype.StatusIdle,
		Agent: apitype.ThreadAgent{
			Type: apitype.ThreadAgentAgent, ID: "agent_" + name, Version: 2, Name: name, Description: "does " + name,
			System: "You are " + name + ".", Model: apitype.ModelConfig{ID: "claude-sonnet-4-5"},
			Tools: []apitype.Tool{{Type: apitype.ToolTypeAgentToolset}}, MCPServers: []apitype.MCPServer{}, Skills: []apitype.SkillRef{},
		},
		CreatedAt: created,
		UpdatedAt: created,
	}
}

// sameThread fails unless got is want as stored: every field, times to the microsecond.
func sameThread(t testing.TB, got *apitype.SessionThread, want apitype.SessionThread, what string) {
	t.Helper()
	gb, err := json.Marshal(got)
	must(t, err, "encode thread")
	wb, err := json.Marshal(&want)
	must(t, err, "encode thread")
	if !jsonEqual(gb, wb) {
		t.Fatalf("%s:\n got %s\nwant %s", what, gb, wb)
	}
}

// testThreadAppend: an append creates the threads it names and updates the stored ones (status, usage, stats
// and updated_at; the rest is kept), in its transaction: an append that fails writes no thread. A session
// create stores its threads; a session delete removes them.
func testThreadAppend(t *testing.T, h Harness) {
	s := h.open(t)
	created := apitype.Now()
	sess := newSession("agent_x", 1, created)
	primary := newThread(sess.ID, nil, "coordinator", created)
	got, _, err := s.SessionCreate(ctxBg, &store.SessionCreateParams{Session: sess, Threads: []apitype.SessionThread{primary}})
	must(t, err, "create a session with its primary thread")
	equal(t, got.ID, sess.ID, "session id")
	stored, err := s.ThreadGet(ctxBg, sess.ID, primary.ID)
	must(t, err, "get the primary thread")
	sameThread(t, stored, primary, "the primary thread")
	if !stored.Primary() {
		t.Fatalf("the primary thread has parent %v", stored.ParentThreadID)
	}
	// With initial events too.
	sess2 := newSession("agent_x", 1, created)
	primary2 := newThread(sess2.ID, nil, "coordinator", created)
	_, initial, err := s.SessionCreate(ctxBg, &store.SessionCreateParams{Session: sess2, Threads: []apitype.SessionThread{primary2},
		InitialEvents: []apitype.NewEvent{userMessage("go")}})
	must(t, err, "create a session with its primary thread and an initial event")
	equal(t, len(initial), 1, "initial events")
	stored, err = s.ThreadGet(ctxBg, sess2.ID, primary2.ID)
	must(t, err, "get the second session's primary thread")
	sameThread(t, stored, primary2, "the second session's primary thread")

	// An append creates a child with its created event.
	child := newThread(sess.ID, &primary.ID, "researcher", apitype.Now())
	child.WorkflowRunID = new("wfr_1")
	evs, err := s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Threads: []apitype.SessionThread{child},
		Events: []apitype.NewEvent{{Type: apitype.EventSessionThreadCreated, Processed: true, CrossPost: true, Thread: child.ID,
			Data: []byte(fmt.Sprintf(`{"session_thread_id":%q,"agent_name":"researcher"}`, child.ID))}}})
	must(t, err, "append a child's creation")
	equal(t, len(evs), 1, "appended events")
	stored, err = s.ThreadGet(ctxBg, sess.ID, child.ID)
	must(t, err, "get the child")
	sameThread(t, stored, child, "the child as created")
	if stored.Primary() || *stored.ParentThreadID != primary.ID {
		t.Fatalf("the child's parent is %v, want %s", stored.ParentThreadID, primary.ID)
	}

	// An update takes the status, usage, stats and updated_at, whatever else it says.
	archivedAt := apitype.Now()
	upd := child
	upd.Agent.Name, upd.Agent.System = "impostor", "changed"
	upd.ParentThreadID = nil
	upd.WorkflowRunID = nil
	upd.CreatedAt = created.Add(-time.Hour)
	upd.ArchivedAt = &archivedAt
	upd.Status = apitype.StatusRunning
	upd.Usage = &apitype.SessionUsage{InputTokens: 10, OutputTokens: 20}
	upd.Stats = &apitype.ThreadStats{ActiveSeconds: 1.5, DurationSeconds: 3, StartupSeconds: 0.25}
	upd.UpdatedAt = apitype.Now().Add(time.Second)
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Threads: []apitype.SessionThread{upd},
		Events: []apitype.NewEvent{{Type: apitype.EventSessionThreadStatusRunning, Processed: true, Thread: child.ID}}})
	must(t, err, "append a child's status")
	want := upd
	store.KeepThread(&want, &child)
	stored, err = s.ThreadGet(ctxBg, sess.ID, child.ID)
	must(t, err, "get the updated child")
	sameThread(t, stored, want, "the updated child")
	equal(t, stored.Agent.Name, "researcher", "the kept agent")
	equal(t, *stored.ParentThreadID, primary.ID, "the kept parent")
	equal(t, *stored.WorkflowRunID, "wfr_1", "the kept workflow run")
	sameTime(t, stored.CreatedAt, child.CreatedAt, "the kept created_at")
	if stored.ArchivedAt != nil {
		t.Fatalf("an update archived the thread at %v", stored.ArchivedAt)
	}
	equal(t, stored.Status, apitype.StatusRunning, "the new status")
	equal(t, stored.Usage.OutputTokens, 20, "the new usage")
	equal(t, stored.Stats.DurationSeconds, 3, "the new stats")
	sameTime(t, stored.UpdatedAt, upd.UpdatedAt, "the new updated_at")

	// One append may create a thread and update it, or name a thread twice: the later write applies to the
	// earlier, as two appends in turn would. It may write threads without events.
	grand := newThread(sess.ID, &child.ID, "helper", apitype.Now())
	grandIdle := grand
	grandIdle.Status, grandIdle.Agent.Name = apitype.StatusTerminated, "ignored"
	grandIdle.UpdatedAt = grand.UpdatedAt.Add(time.Second)
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Threads: []apitype.SessionThread{grand, grandIdle}})
	must(t, err, "append a thread twice, with no event")
	want = grandIdle
	store.KeepThread(&want, &grand)
	stored, err = s.ThreadGet(ctxBg, sess.ID, grand.ID)
	must(t, err, "get the thread written twice")
	sameThread(t, stored, want, "the thread written twice")

	// A failed append writes no thread, new or stored: a wrong expected seq, a lost lease, an unknown session.
	last := allEvents(t, s, sess.ID)
	lost := newThread(sess.ID, &primary.ID, "lost", apitype.Now())
	stale := upd
	stale.Status = apitype.StatusTerminated
	stale.UpdatedAt = upd.UpdatedAt.Add(time.Minute)
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, ExpectedSeq: 1, Threads: []apitype.SessionThread{lost, stale},
		Events: []apitype.NewEvent{agentMessage("stale")}})
	mustIs(t, err, store.ErrConflict, "append with a stale expected seq")
	wake(t, s, sess.ID, "work", "wake the session")
	lease, err := claim(s, "brain", time.Minute, sess.ID)
	must(t, err, "claim the session")
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Lease: lease, Threads: []apitype.SessionThread{lost},
		Events: []apitype.NewEvent{agentMessage("held")}})
	must(t, err, "a fenced append under the lease")
	_, err = s.ThreadGet(ctxBg, sess.ID, lost.ID)
	must(t, err, "the fenced append's thread")
	lost2 := newThread(sess.ID, &primary.ID, "lost2", apitype.Now())
	must(t, s.LeaseRelease(ctxBg, lease), "release the lease")
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Lease: lease, Threads: []apitype.SessionThread{lost2, stale},
		Events: []apitype.NewEvent{agentMessage("too late")}, Status: apitype.StatusTerminated})
	mustIs(t, err, store.ErrLeaseLost, "a fenced append with a lost lease")
	_, err = s.ThreadGet(ctxBg, sess.ID, lost2.ID)
	mustIs(t, err, store.ErrNotFound, "a thread of an append with a lost lease")
	stored, err = s.ThreadGet(ctxBg, sess.ID, child.ID)
	must(t, err, "get the child after the failed appends")
	equal(t, stored.Status, apitype.StatusRunning, "the child's status after the failed appends")
	sameTime(t, stored.UpdatedAt, upd.UpdatedAt, "the child's updated_at after the failed appends")
	equal(t, len(allEvents(t, s, sess.ID)), len(last)+2, "events after the failed appends (the wake and the held append)")
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: "sesn_missing", Threads: []apitype.SessionThread{lost2},
		Events: []apitype.NewEvent{agentMessage("nobody")}})
	mustIs(t, err, store.ErrNotFound, "append to an unknown session")
	// A thread without an id is refused, and nothing of its append is written.
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Threads: []apitype.SessionThread{{Status: "idle"}},
		Events: []apitype.NewEvent{agentMessage("no id")}})
	if err == nil {
		t.Fatal("an append with a thread without id succeeded")
	}
	equal(t, len(allEvents(t, s, sess.ID)), len(last)+2, "events after the refused append")

	// A thread is its session's: another session, or an unknown one, has no such thread.
	_, err = s.ThreadGet(ctxBg, sess2.ID, child.ID)
	mustIs(t, err, store.ErrNotFound, "another session's thread")
	_, err = s.ThreadGet(ctxBg, "sesn_missing", child.ID)
	mustIs(t, err, store.ErrNotFound, "a thread of an unknown session")
	_, err = s.ThreadGet(ctxBg, sess.ID, newThreadID())
	mustIs(t, err, store.ErrNotFound, "an unknown thread")

	// Deleting the session deletes its threads, and only its.
	must(t, s.SessionDelete(ctxBg, sess.ID), "delete the session")
	for _, id := range []string{primary.ID, child.ID, grand.ID, lost.ID} {
		_, err = s.ThreadGet(ctxBg, sess.ID, id)
		mustIs(t, err, store.ErrNotFound, "a thread of a deleted session")
	}
	list, err := s.ThreadList(ctxBg, &store.ThreadListParams{SessionID: sess.ID, Limit: 10})
	if err == nil && len(list) != 0 {
		t.Fatalf("a deleted session lists %d threads", len(list))
	}
	mustIsOneOf(t, errOrNil(err), "list the threads of a deleted session", errNone, store.ErrNotFound)
	_, err = s.ThreadGet(ctxBg, sess2.ID, primary2.ID)
	must(t, err, "another session's thread after a delete")
}

// errNone stands for "no error" in mustIsOneOf.
var errNone = errors.New("no error")

func errOrNil(err error) error {
	if err == nil {
		return errNone
	}
	return err
}

// testThreadAppendsConcurrent: appends that write threads, to many sessions at once and to each session from
// two writers (which adapters may commit in one group), each create and update their own threads, in order.
func testThreadAppendsConcurrent(t *testing.T, h Harness) {
	s := h.open(t)
	const sessions, perSession, steps = 12, 2, 6
	ids := make([]string, sessions)
	var threads []apitype.SessionThread
	for i := range ids {
		ids[i] = createSession(t, s).ID
		for j := range perSession {
			threads = append(threads, newThread(ids[i], nil, fmt.Sprintf("worker%d.%d", i, j), apitype.Now()))
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(threads))
	start := make(chan struct{})
	for _, th := range threads {
		wg.Go(func() {
			<-start
			for step := range steps {
				th.Status = fmt.Sprintf("step%d", step)
				th.Usage = &apitype.SessionUsage{OutputTokens: int64(step)}
				th.UpdatedAt = th.CreatedAt.Add(time.Duration(step) * time.Second)
				_, err := s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: th.SessionID, Threads: []apitype.SessionThread{th},
					Events: []apitype.NewEvent{threadEvent(th.ID, step%2 == 0, th.Status)}})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err, "concurrent append with a thread")
	}
	for _, th := range threads {
		got, err := s.ThreadGet(ctxBg, th.SessionID, th.ID)
		must(t, err, "get a thread")
		equal(t, got.Status, fmt.Sprintf("step%d", steps-1), "the last status")
		equal(t, got.Usage.OutputTokens, steps-1, "the last usage")
		sameTime(t, got.CreatedAt, th.CreatedAt, "created_at")
		sameTime(t, got.UpdatedAt, th.CreatedAt.Add((steps-1)*time.Second), "updated_at")
		events, err := s.EventList(ctxBg, &store.EventListParams{SessionID: th.SessionID, Scope: store.ScopeThread, Thread: th.ID, Limit: 100})
		must(t, err, "list a thread's events")
		equal(t, len(events), steps, "a thread's events")
	}
	for _, id := range ids {
		stream, err := s.EventList(ctxBg, &store.EventListParams{SessionID: id, Limit: 100})
		must(t, err, "list the session's stream")
		equal(t, len(stream), perSession*steps/2, "the cross-posted events on the stream")
		list, err := s.ThreadList(ctxBg, &store.ThreadListParams{SessionID: id, Limit: 100})
		must(t, err, "list a session's threads")
		equal(t, len(list), perSession, "a session's threads")
	}
}

// testThreadArchive: archiving a thread is checked against it as stored, happens once, and is kept by later
// writes.
func testThreadArchive(t *testing.T, h Harness) {
	s := h.open(t)
	sess := createSession(t, s)
	primary := newThread(sess.ID, nil, "coordinator", apitype.Now())
	child := newThread(sess.ID, &primary.ID, "worker", apitype.Now())
	child.Status = apitype.StatusRunning
	_, err := s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Threads: []apitype.SessionThread{primary, child}})
	must(t, err, "create threads")

	refusal := errors.New("the thread is running")
	var seen *apitype.SessionThread
	_, err = s.ThreadArchive(ctxBg, sess.ID, child.ID, func(th *apitype.SessionThread) error {
		seen = th
		if th.Status == apitype.StatusRunning {
			return refusal
		}
		return nil
	})
	if err != refusal {
		t.Fatalf("archive refused by its check: got error %v, want the check's own", err)
	}
	if seen == nil {
		t.Fatal("the check was not called")
	}
	sameThread(t, seen, child, "the thread the check saw")
	stored, err := s.ThreadGet(ctxBg, sess.ID, child.ID)
	must(t, err, "get the thread")
	sameThread(t, stored, child, "a thread whose archive was refused")

	idle := child
	idle.Status, idle.UpdatedAt = apitype.StatusIdle, child.UpdatedAt.Add(time.Second)
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Threads: []apitype.SessionThread{idle}})
	must(t, err, "idle the thread")
	before := apitype.Now()
	archived, err := s.ThreadArchive(ctxBg, sess.ID, child.ID, func(th *apitype.SessionThread) error {
		equal(t, th.Status, apitype.StatusIdle, "the status the check sees")
		return nil
	})
	must(t, err, "archive the thread")
	if archived.ArchivedAt == nil || archived.ArchivedAt.Before(before) {
		t.Fatalf("archived_at %v, want from %v", archived.ArchivedAt, before)
	}
	sameTime(t, archived.UpdatedAt, *archived.ArchivedAt, "updated_at of an archive")
	want := idle
	want.ArchivedAt, want.UpdatedAt = archived.ArchivedAt, archived.UpdatedAt
	sameThread(t, archived, want, "the archived thread")
	stored, err = s.ThreadGet(ctxBg, sess.ID, child.ID)
	must(t, err, "get the archived thread")
	sameThread(t, stored, want, "the archived thread as stored")

	// Again: nothing changes; the check still runs (nil: no check).
	again, err := s.ThreadArchive(ctxBg, sess.ID, child.ID, nil)
	must(t, err, "archive an archived thread")
	sameThread(t, again, want, "an archived thread archived again")
	_, err = s.ThreadArchive(ctxBg, sess.ID, child.ID, func(*apitype.SessionThread) error { return refusal })
	if err != refusal {
		t.Fatalf("archive of an archived thread refused by its check: got %v, want the check's own", err)
	}

	// A later write of the thread keeps its archive.
	later := idle
	later.Status, later.UpdatedAt = apitype.StatusTerminated, archived.UpdatedAt.Add(time.Second)
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Threads: []apitype.SessionThread{later}})
	must(t, err, "write an archived thread")
	stored, err = s.ThreadGet(ctxBg, sess.ID, child.ID)
	must(t, err, "get the thread")
	if stored.ArchivedAt == nil || !stored.ArchivedAt.Equal(*archived.ArchivedAt) {
		t.Fatalf("archived_at after a write: %v, want %v", stored.ArchivedAt, archived.ArchivedAt)
	}
	equal(t, stored.Status, apitype.StatusTerminated, "status after a write")

	for _, c := range []struct{ sess, thread, what string }{
		{sess.ID, newThreadID(), "an unknown thread"},
		{"sesn_missing", child.ID, "a thread of an unknown session"},
		{createSession(t, s).ID, child.ID, "another session's thread"},
	} {
		_, err := s.ThreadArchive(ctxBg, c.sess, c.thread, func(*apitype.SessionThread) error {
			t.Fatalf("archive of %s called its check", c.what)
			return nil
		})
		mustIs(t, err, store.ErrNotFound, "archive "+c.what)
	}
}

// testThreadList: a session's threads by (created_at, id), archived included, filtered by status, in pages.
func testThreadList(t *testing.T, h Harness) {
	s := h.open(t)
	sess, other := createSession(t, s), createSession(t, s)
	var all []apitype.SessionThread
	statuses := []string{apitype.StatusIdle, apitype.StatusRunning, apitype.StatusTerminated}
	for i := range 9 {
		// Threads 3-5 share a creation time: the id orders them.
		created := base.Add(time.Duration(min(i, 3)+max(i-5, 0)) * time.Second)
		th := newThread(sess.ID, nil, fmt.Sprintf("w%d", i), created)
		th.Status = statuses[i%3]
		all = append(all, th)
	}
	// Written out of order, across appends.
	_, err := s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Threads: []apitype.SessionThread{all[8], all[4], all[0]}})
	must(t, err, "write threads")
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: sess.ID, Threads: []apitype.SessionThread{all[5], all[1], all[7], all[3], all[2], all[6]}})
	must(t, err, "write threads")
	_, err = s.EventAppend(ctxBg, &store.EventAppendParams{SessionID: other.ID, Threads: []apitype.SessionThread{newThread(other.ID, nil, "other", base)}})
	must(t, err, "write another session's thread")
	_, err = s.ThreadArchive(ctxBg, sess.ID, all[2].ID, nil)
	must(t, err, "archive a thread")
	slices.SortFunc(all, func(a, b apitype.SessionThread) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	ids := func(ts []apitype.SessionThread) []string {
		out := make([]string, len(ts))
		for i, th := range ts {
			out[i] = th.ID
		}
		return out
	}

	page := func(p store.ThreadListParams) []apitype.SessionThread {
		t.Helper()
		got, err := s.ThreadList(ctxBg, &p)
		must(t, err, "list threads")
		return got
	}
	got := page(store.ThreadListParams{SessionID: sess.ID, Limit: 100})
	if !slices.Equal(ids(got), ids(all)) {
		t.Fatalf("threads %v, want %v", ids(got), ids(all))
	}
	for i := range got {
		if got[i].ID == all[i].ID && got[i].ArchivedAt == nil {
			sameThread(t, &got[i], all[i], "a listed thread")
		}
	}
	for _, limit := range []int{1, 2, 4} {
		var paged []apitype.SessionThread
		var after *store.Cursor
		for range 20 {
			p := page(store.ThreadListParams{SessionID: sess.ID, Limit: limit, After: after})
			if len(p) > limit {
				t.Fatalf("a page of %d threads with limit %d", len(p), limit)
			}
			paged = append(paged, p...)
			if len(p) < limit {
				break
			}
			after = &store.Cursor{CreatedAt: p[len(p)-1].CreatedAt, ID: p[len(p)-1].ID}
		}
		if !slices.Equal(ids(paged), ids(all)) {
			t.Fatalf("paged by %d: threads %v, want %v", limit, ids(paged), ids(all))
		}
	}
	for _, want := range [][]string{{apitype.StatusRunning}, {apitype.StatusIdle, apitype.StatusTerminated}, {"unheard-of"}} {
		var exp []string
		for _, th := range all {
			if slices.Contains(want, th.Status) {
				exp = append(exp, th.ID)
			}
		}
		got := page(store.ThreadListParams{SessionID: sess.ID, Statuses: want, Limit: 100})
		if !slices.Equal(ids(got), exp) && !(len(got) == 0 && len(exp) == 0) {
			t.Fatalf("statuses %v: threads %v, want %v", want, ids(got), exp)
		}
		if len(exp) > 1 {
			first := page(store.ThreadListParams{SessionID: sess.ID, Statuses: want, Limit: 1})
			next := page(store.ThreadListParams{SessionID: sess.ID, Statuses: want, Limit: 100,
				After: &store.Cursor{CreatedAt: first[0].CreatedAt, ID: first[0].ID}})
			if !slices.Equal(ids(append(first, next...)), exp) {
				t.Fatalf("statuses %v, paged: threads %v then %v, want %v", want, ids(first), ids(next), exp)
			}
		}
	}
	equal(t, len(page(store.ThreadListParams{SessionID: other.ID, Limit: 100})), 1, "the other session's threads")
	equal(t, len(page(store.ThreadListParams{SessionID: createSession(t, s).ID, Limit: 100})), 0, "a session without threads")
}
