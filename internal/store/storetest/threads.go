package storetest

import (
	"fmt"
	"slices"
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
func newThreadID() string { return apitype.NewID("sthr_") }

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
