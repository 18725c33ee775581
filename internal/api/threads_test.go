package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// threaded is a multi-agent session as a brain leaves it: a primary thread and a child it started.
type threaded struct {
	sessionID        string
	primary, child   string
	primaryT, childT apitype.SessionThread
}

// newThreads writes a primary thread and a child (running) into the session, with the events that say so, as a
// brain running threads would.
func (h *harness) newThreads(ctx context.Context, sessionID string) *threaded {
	h.t.Helper()
	now := time.Now().UTC()
	p := apitype.SessionThread{Type: apitype.ObjectSessionThread, ID: apitype.NewID(apitype.PrefixThread), SessionID: sessionID,
		Status: apitype.StatusRunning, Agent: apitype.ThreadAgent{Type: apitype.ThreadAgentAgent, Name: "coordinator"},
		CreatedAt: now, UpdatedAt: now}
	c := apitype.SessionThread{Type: apitype.ObjectSessionThread, ID: apitype.NewID(apitype.PrefixThread), SessionID: sessionID,
		ParentThreadID: &p.ID, Status: apitype.StatusRunning,
		Agent:     apitype.ThreadAgent{Type: apitype.ThreadAgentInline, Name: "researcher"},
		CreatedAt: now.Add(time.Millisecond), UpdatedAt: now.Add(time.Millisecond)}
	created, err := apitype.MakeEvent(apitype.EventSessionThreadCreated, apitype.ThreadCreated{SessionThreadID: c.ID, AgentName: "researcher"})
	if err != nil {
		h.t.Fatal(err)
	}
	created.Processed = true
	if _, err := h.store.EventAppend(ctx, &store.EventAppendParams{SessionID: sessionID, Events: []apitype.NewEvent{created},
		Threads: []apitype.SessionThread{p, c}}); err != nil {
		h.t.Fatalf("append threads: %v", err)
	}
	return &threaded{sessionID: sessionID, primary: p.ID, child: c.ID, primaryT: p, childT: c}
}

// appendIn appends a server event of a thread ("" the primary), cross-posted or not.
func (h *harness) appendIn(ctx context.Context, sessionID, thread string, crossPost bool, typ apitype.EventType, payload any,
	threads ...apitype.SessionThread,
) apitype.Event {
	h.t.Helper()
	ev, err := apitype.MakeEvent(typ, payload)
	if err != nil {
		h.t.Fatal(err)
	}
	ev.Processed, ev.Thread, ev.CrossPost = true, thread, crossPost
	out, err := h.store.EventAppend(ctx, &store.EventAppendParams{SessionID: sessionID, Events: []apitype.NewEvent{ev},
		Threads: threads})
	if err != nil {
		h.t.Fatalf("append %s: %v", typ, err)
	}
	return out[0]
}

// setStatus changes a thread's status as a brain would, with its status event on its stream (cross-posted).
func (h *harness) setStatus(ctx context.Context, th *threaded, status string, typ apitype.EventType) {
	h.t.Helper()
	c := th.childT
	c.Status, c.UpdatedAt = status, time.Now().UTC()
	h.appendIn(ctx, th.sessionID, th.child, true, typ, apitype.ThreadStatus{SessionThreadID: th.child, AgentName: "researcher"}, c)
}

// TestThreads: the threads API through the official SDK: a single-agent session has none; a multi-agent
// session's list (filters, paging), get, archive (an idle child only, idempotent), and the 404s.
func TestThreads(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	single := h.newSession(ctx, agentID, envID)
	page, err := h.client.Beta.Sessions.Threads.List(ctx, single, anthropic.BetaSessionThreadListParams{})
	if err != nil || len(page.Data) != 0 || page.NextPage != "" {
		t.Fatalf("threads of a single-agent session: %+v, %v; want an empty list", page, err)
	}

	sess := h.newSession(ctx, agentID, envID)
	th := h.newThreads(ctx, sess)
	page, err = h.client.Beta.Sessions.Threads.List(ctx, sess, anthropic.BetaSessionThreadListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 2 || page.Data[0].ID != th.primary || page.Data[1].ID != th.child {
		t.Fatalf("threads: %s; want the primary then the child", page.RawJSON())
	}
	if page.Data[0].ParentThreadID != "" || page.Data[1].ParentThreadID != th.primary ||
		page.Data[1].Agent.Name != "researcher" || page.Data[1].Type != "session_thread" || page.Data[1].SessionID != sess {
		t.Errorf("threads: %s", page.RawJSON())
	}

	// Paging: forward, one at a time, never into an empty page.
	page, err = h.client.Beta.Sessions.Threads.List(ctx, sess, anthropic.BetaSessionThreadListParams{Limit: anthropic.Int(1)})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != th.primary || page.NextPage == "" {
		t.Fatalf("first page: %v %s", err, page.RawJSON())
	}
	page, err = h.client.Beta.Sessions.Threads.List(ctx, sess, anthropic.BetaSessionThreadListParams{Limit: anthropic.Int(1),
		Page: anthropic.String(page.NextPage)})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != th.child || page.NextPage != "" {
		t.Fatalf("second page: %v %s", err, page.RawJSON())
	}
	var all []string
	for it := h.client.Beta.Sessions.Threads.ListAutoPaging(ctx, sess, anthropic.BetaSessionThreadListParams{Limit: anthropic.Int(1)}); it.Next(); {
		all = append(all, it.Current().ID)
	}
	if !slices.Equal(all, []string{th.primary, th.child}) {
		t.Errorf("auto-paging: %v", all)
	}

	// statuses[]: any of them, validated.
	h.setStatus(ctx, th, apitype.StatusIdle, apitype.EventSessionThreadStatusIdle)
	page, err = h.client.Beta.Sessions.Threads.List(ctx, sess, anthropic.BetaSessionThreadListParams{
		Statuses: []anthropic.BetaManagedAgentsSessionThreadStatus{anthropic.BetaManagedAgentsSessionThreadStatusIdle}})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != th.child {
		t.Fatalf("idle threads: %v %s", err, page.RawJSON())
	}
	page, err = h.client.Beta.Sessions.Threads.List(ctx, sess, anthropic.BetaSessionThreadListParams{
		Statuses: []anthropic.BetaManagedAgentsSessionThreadStatus{"idle", "running"}})
	if err != nil || len(page.Data) != 2 {
		t.Fatalf("idle or running threads: %v %s", err, page.RawJSON())
	}
	for _, q := range []string{"statuses[]=sleeping", "limit=0", "limit=1001", "page=bm9wZQ"} {
		status, _, body := h.do("GET", "/v1/sessions/"+sess+"/threads?"+q, "")
		var env envelope
		_ = json.Unmarshal(body, &env)
		if status != http.StatusBadRequest || env.Error.Type != apitype.ErrInvalidRequest {
			t.Errorf("%s: %d %s, want 400 invalid_request_error", q, status, body)
		}
	}

	// Get, and the 404s: an unknown session, an unknown thread, a thread of another session.
	got, err := h.client.Beta.Sessions.Threads.Get(ctx, th.child, anthropic.BetaSessionThreadGetParams{SessionID: sess})
	if err != nil || got.ID != th.child || got.Status != "idle" || got.ParentThreadID != th.primary {
		t.Fatalf("get child: %v %+v", err, got)
	}
	_, err = h.client.Beta.Sessions.Threads.Get(ctx, th.child, anthropic.BetaSessionThreadGetParams{SessionID: single})
	wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
	_, err = h.client.Beta.Sessions.Threads.Get(ctx, "sthr_nope", anthropic.BetaSessionThreadGetParams{SessionID: sess})
	wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
	_, err = h.client.Beta.Sessions.Threads.List(ctx, "sesn_nope", anthropic.BetaSessionThreadListParams{})
	wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
	_, err = h.client.Beta.Sessions.Threads.Events.List(ctx, th.child, anthropic.BetaSessionThreadEventListParams{SessionID: single})
	wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
	_, err = h.client.Beta.Sessions.Threads.Archive(ctx, th.child, anthropic.BetaSessionThreadArchiveParams{SessionID: single})
	wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)

	// Archive: never the primary, never a running thread; an idle child, once.
	_, err = h.client.Beta.Sessions.Threads.Archive(ctx, th.primary, anthropic.BetaSessionThreadArchiveParams{SessionID: sess})
	if aerr := wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest); !strings.Contains(aerr.Error(), "primary") {
		t.Errorf("archive the primary: %v", aerr)
	}
	h.setStatus(ctx, th, apitype.StatusRunning, apitype.EventSessionThreadStatusRunning)
	_, err = h.client.Beta.Sessions.Threads.Archive(ctx, th.child, anthropic.BetaSessionThreadArchiveParams{SessionID: sess})
	if aerr := wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest); !strings.Contains(aerr.Error(), "running") {
		t.Errorf("archive a running thread: %v", aerr)
	}
	h.setStatus(ctx, th, apitype.StatusIdle, apitype.EventSessionThreadStatusIdle)
	a, err := h.client.Beta.Sessions.Threads.Archive(ctx, th.child, anthropic.BetaSessionThreadArchiveParams{SessionID: sess})
	if err != nil || a.ArchivedAt.IsZero() || a.ID != th.child {
		t.Fatalf("archive: %v %+v", err, a)
	}
	again, err := h.client.Beta.Sessions.Threads.Archive(ctx, th.child, anthropic.BetaSessionThreadArchiveParams{SessionID: sess})
	if err != nil || !again.ArchivedAt.Equal(a.ArchivedAt) {
		t.Fatalf("archive twice: %v %s, want %s unchanged", err, again.RawJSON(), a.RawJSON())
	}
	page, err = h.client.Beta.Sessions.Threads.List(ctx, sess, anthropic.BetaSessionThreadListParams{})
	if err != nil || len(page.Data) != 2 {
		t.Errorf("archived threads are listed: %v %s", err, page.RawJSON())
	}
}

// TestThreadEvents: each thread's own events (list and stream), and the session's: the primary's and the
// children's cross-posted ones.
func TestThreadEvents(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	sess := h.newSession(ctx, agentID, envID)
	th := h.newThreads(ctx, sess)
	text := func(s string) apitype.AgentMessage {
		return apitype.AgentMessage{Content: []apitype.ContentBlock{{Type: apitype.ContentText, Text: s}}}
	}
	p1 := h.appendIn(ctx, sess, "", false, apitype.EventAgentMessage, text("primary says"))
	c1 := h.appendIn(ctx, sess, th.child, false, apitype.EventAgentMessage, text("child thinks aloud"))
	c2 := h.appendIn(ctx, sess, th.child, true, apitype.EventAgentMessage, text("child reports"))
	p2 := h.appendIn(ctx, sess, "", false, apitype.EventAgentMessage, text("primary again"))

	list := func(thread string, limit int64) []string {
		t.Helper()
		var out []string
		for it := h.client.Beta.Sessions.Threads.Events.ListAutoPaging(ctx, thread,
			anthropic.BetaSessionThreadEventListParams{SessionID: sess, Limit: anthropic.Int(limit)}); it.Next(); {
			out = append(out, it.Current().ID)
		}
		return out
	}
	if got, want := list(th.child, 1), []string{c1.ID, c2.ID}; !slices.Equal(got, want) {
		t.Errorf("child's events: %v, want %v", got, want)
	}
	primary := list(th.primary, 100)
	if slices.Contains(primary, c1.ID) || slices.Contains(primary, c2.ID) || !slices.Contains(primary, p1.ID) ||
		!slices.Contains(primary, p2.ID) {
		t.Errorf("primary's events: %v (p %s %s, c %s %s)", primary, p1.ID, p2.ID, c1.ID, c2.ID)
	}
	var session []string
	for it := h.client.Beta.Sessions.Events.ListAutoPaging(ctx, sess, anthropic.BetaSessionEventListParams{}); it.Next(); {
		session = append(session, it.Current().ID)
	}
	if slices.Contains(session, c1.ID) || !slices.Contains(session, c2.ID) || !slices.Contains(session, p2.ID) {
		t.Errorf("session's events: %v: want the primary's and the cross-posted %s, not %s", session, c2.ID, c1.ID)
	}

	// The child's stream, from its beginning (Last-Event-ID 0), ends with the thread's termination.
	h.setStatus(ctx, th, apitype.StatusTerminated, apitype.EventSessionThreadStatusTerminated)
	status, hdr, body := h.do("GET", "/v1/sessions/"+sess+"/threads/"+th.child+"/stream", "", "Last-Event-ID", "0")
	if status != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("child's stream: %d %s", status, body)
	}
	var streamed []string
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
			streamed = append(streamed, id)
		}
	}
	if len(streamed) != 3 || streamed[0] != c1.ID || streamed[1] != c2.ID {
		t.Errorf("child's stream: %v, want %s, %s and the termination\n%s", streamed, c1.ID, c2.ID, body)
	}

	// The SDK's thread stream: the primary's, from after p1; a child's event is not on it.
	stream := h.client.Beta.Sessions.Threads.Events.StreamEvents(ctx, th.primary,
		anthropic.BetaSessionThreadEventStreamParams{SessionID: sess}, option.WithHeader("Last-Event-ID", p1.ID))
	defer stream.Close()
	if !stream.Next() || stream.Current().ID != p2.ID {
		t.Fatalf("primary's stream: %v %+v, want %s", stream.Err(), stream.Current(), p2.ID)
	}
	c3 := h.appendIn(ctx, sess, th.child, false, apitype.EventAgentMessage, text("child alone"))
	p3 := h.appendIn(ctx, sess, "", false, apitype.EventAgentMessage, text("primary, live"))
	if !stream.Next() || stream.Current().ID != p3.ID {
		t.Fatalf("primary's stream: %v %+v, want %s (not the child's %s)", stream.Err(), stream.Current(), p3.ID, c3.ID)
	}

	_, err := h.client.Beta.Sessions.Threads.Events.List(ctx, "sthr_nope", anthropic.BetaSessionThreadEventListParams{SessionID: sess})
	wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)
	status, _, body = h.do("GET", "/v1/sessions/"+sess+"/threads/sthr_nope/stream", "")
	if status != http.StatusNotFound {
		t.Errorf("stream of an unknown thread: %d %s", status, body)
	}
}

// TestThreadRouting: a client's answer goes to the thread of the call it answers (cross-posted, its echo naming
// the thread), an interrupt to the thread it names; a thread that no longer waits refuses an answer.
func TestThreadRouting(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	sess := h.newSession(ctx, agentID, envID)
	th := h.newThreads(ctx, sess)
	use := func(thread string, typ apitype.EventType) apitype.Event {
		return h.appendIn(ctx, sess, thread, thread != "", typ, apitype.AgentToolUse{Name: "lookup", Input: json.RawMessage(`{"q":"x"}`),
			EvaluatedPermission: apitype.PermissionAsk})
	}
	send := func(evs ...anthropic.BetaManagedAgentsEventParamsUnion) (*anthropic.BetaManagedAgentsSendSessionEvents, error) {
		return h.client.Beta.Sessions.Events.Send(ctx, sess, anthropic.BetaSessionEventSendParams{Events: evs})
	}
	stored := func(id string) *apitype.Event {
		t.Helper()
		ev, err := h.store.EventGet(ctx, sess, id)
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	threadOf := func(raw string) string {
		var d struct {
			SessionThreadID *string `json:"session_thread_id"`
		}
		decodeRaw(t, raw, &d)
		if d.SessionThreadID == nil {
			return "(absent)"
		}
		return *d.SessionThreadID
	}

	// A child's custom tool call and a child's confirmation: routed to the child, cross-posted, named.
	custom := use(th.child, apitype.EventAgentCustomToolUse)
	ask := use(th.child, apitype.EventAgentToolUse)
	res := anthropic.BetaManagedAgentsEventParamsOfUserCustomToolResult(custom.ID)
	res.OfUserCustomToolResult.Content = []anthropic.BetaManagedAgentsUserCustomToolResultEventParamsContentUnion{
		{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: "found"}}}
	sent, err := send(res, anthropic.BetaManagedAgentsEventParamsOfUserToolConfirmation(
		anthropic.BetaManagedAgentsUserToolConfirmationEventParamsResultAllow, ask.ID))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range sent.Data {
		if got := threadOf(e.RawJSON()); got != th.child {
			t.Errorf("echo of %s: session_thread_id %s, want %s: %s", e.Type, got, th.child, e.RawJSON())
		}
		if s := stored(e.ID); s.Thread != th.child || !s.CrossPost {
			t.Errorf("stored %s: thread %q cross-post %v, want %s cross-posted", e.Type, s.Thread, s.CrossPost, th.child)
		}
	}
	var childEvents []string
	for it := h.client.Beta.Sessions.Threads.Events.ListAutoPaging(ctx, th.child,
		anthropic.BetaSessionThreadEventListParams{SessionID: sess}); it.Next(); {
		childEvents = append(childEvents, it.Current().ID)
	}
	if !slices.Contains(childEvents, sent.Data[0].ID) || !slices.Contains(childEvents, sent.Data[1].ID) {
		t.Errorf("child's events %v lack the answers %s %s", childEvents, sent.Data[0].ID, sent.Data[1].ID)
	}
	// A second answer to the same call is accepted, as in a single-agent session (the brain keeps the first).
	if _, err := send(anthropic.BetaManagedAgentsEventParamsOfUserCustomToolResult(custom.ID)); err != nil {
		t.Errorf("a second answer: %v", err)
	}

	// The primary's call: answered on the primary, unnamed.
	mine := use("", apitype.EventAgentCustomToolUse)
	sent, err = send(anthropic.BetaManagedAgentsEventParamsOfUserCustomToolResult(mine.ID))
	if err != nil {
		t.Fatal(err)
	}
	if got := threadOf(sent.Data[0].RawJSON()); got != "(absent)" {
		t.Errorf("answer on the primary: session_thread_id %s, want none", got)
	}
	if s := stored(sent.Data[0].ID); s.Thread != "" || s.CrossPost {
		t.Errorf("answer on the primary stored in %q (cross-post %v)", s.Thread, s.CrossPost)
	}

	// Interrupts: of a named child, of the primary by name, of every thread, of an unknown thread.
	intr := func(thread string) anthropic.BetaManagedAgentsEventParamsUnion {
		in := &anthropic.BetaManagedAgentsUserInterruptEventParams{}
		if thread != "" {
			in.SessionThreadID = anthropic.String(thread)
		}
		return anthropic.BetaManagedAgentsEventParamsUnion{OfUserInterrupt: in}
	}
	for _, c := range []struct {
		name, named, thread string
		crossPost           bool
	}{{"child", th.child, th.child, true}, {"primary", th.primary, "", false}, {"every thread", "", "", false}} {
		sent, err := send(intr(c.named))
		if err != nil {
			t.Fatalf("interrupt %s: %v", c.name, err)
		}
		if s := stored(sent.Data[0].ID); s.Thread != c.thread || s.CrossPost != c.crossPost {
			t.Errorf("interrupt %s: stored in %q (cross-post %v), want %q (%v)", c.name, s.Thread, s.CrossPost, c.thread, c.crossPost)
		}
	}
	_, err = send(userText("hi"), intr("sthr_nope"))
	if aerr := wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest); !strings.Contains(aerr.Error(), "events[1].session_thread_id") {
		t.Errorf("interrupt of an unknown thread: %v", aerr)
	}

	// A terminated child, then an archived one, waits for no answer.
	late := use(th.child, apitype.EventAgentCustomToolUse)
	h.setStatus(ctx, th, apitype.StatusTerminated, apitype.EventSessionThreadStatusTerminated)
	_, err = send(anthropic.BetaManagedAgentsEventParamsOfUserCustomToolResult(late.ID))
	if aerr := wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest); !strings.Contains(aerr.Error(), "terminated") {
		t.Errorf("answer to a terminated thread: %v", aerr)
	}
	if _, err := h.client.Beta.Sessions.Threads.Archive(ctx, th.child, anthropic.BetaSessionThreadArchiveParams{SessionID: sess}); err != nil {
		t.Fatalf("archive a terminated thread: %v", err)
	}
	_, err = send(anthropic.BetaManagedAgentsEventParamsOfUserCustomToolResult(late.ID))
	if aerr := wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest); !strings.Contains(aerr.Error(), "archived") {
		t.Errorf("answer to an archived thread: %v", aerr)
	}
}

// TestThreadRoutingToolResult: a self-hosted worker's user.tool_result answers a child thread's built-in call in
// that thread, cross-posted and named; one for the primary's call stays the primary's.
func TestThreadRoutingToolResult(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, _ := h.seed(ctx)
	_, _, sess := h.selfHosted(ctx, agentID)
	th := h.newThreads(ctx, sess)
	for _, c := range []struct {
		thread, named string
	}{{th.child, th.child}, {"", ""}} {
		call := h.appendIn(ctx, sess, c.thread, c.thread != "", apitype.EventAgentToolUse,
			apitype.AgentToolUse{Name: "bash", Input: json.RawMessage(`{"command":"ls"}`), EvaluatedPermission: apitype.PermissionAllow})
		res := anthropic.BetaManagedAgentsEventParamsOfUserToolResult(call.ID)
		sent, err := h.client.Beta.Sessions.Events.Send(ctx, sess, anthropic.BetaSessionEventSendParams{
			Events: []anthropic.BetaManagedAgentsEventParamsUnion{res}})
		if err != nil {
			t.Fatalf("tool result in %q: %v", c.thread, err)
		}
		var d struct {
			SessionThreadID string `json:"session_thread_id"`
		}
		decodeRaw(t, sent.Data[0].RawJSON(), &d)
		ev, err := h.store.EventGet(ctx, sess, sent.Data[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		if d.SessionThreadID != c.named || ev.Thread != c.thread || ev.CrossPost != (c.thread != "") {
			t.Errorf("tool result for a call of %q: echo names %q, stored in %q (cross-post %v)", c.thread,
				d.SessionThreadID, ev.Thread, ev.CrossPost)
		}
	}
}

// TestThreadsArchivedSession: archiving a multi-agent session terminates each of its threads with it: a
// session.thread_status_terminated per thread (a child's on its stream, cross-posted) and every record terminated.
func TestThreadsArchivedSession(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	sess := h.newSession(ctx, agentID, envID)
	th := h.newThreads(ctx, sess)
	if _, err := h.client.Beta.Sessions.Archive(ctx, sess, anthropic.BetaSessionArchiveParams{}); err != nil {
		t.Fatal(err)
	}
	page, err := h.client.Beta.Sessions.Threads.List(ctx, sess, anthropic.BetaSessionThreadListParams{})
	if err != nil || len(page.Data) != 2 {
		t.Fatalf("threads %v %v", page, err)
	}
	for _, d := range page.Data {
		if d.Status != "terminated" {
			t.Errorf("thread %s: %s", d.ID, d.Status)
		}
	}
	child, err := h.store.EventList(ctx, &store.EventListParams{SessionID: sess, Scope: store.ScopeThread, Thread: th.child, Limit: 100})
	if err != nil || len(child) == 0 || child[len(child)-1].Type != apitype.EventSessionThreadStatusTerminated || !child[len(child)-1].CrossPost {
		t.Fatalf("child's events %v %v", child, err)
	}
	evs, err := h.store.EventList(ctx, &store.EventListParams{SessionID: sess, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var got []apitype.EventType
	for _, e := range evs[len(evs)-3:] {
		got = append(got, e.Type)
	}
	if !slices.Equal(got, []apitype.EventType{apitype.EventSessionStatusTerminated, apitype.EventSessionThreadStatusTerminated, apitype.EventSessionThreadStatusTerminated}) {
		t.Errorf("the session's last events %v", got)
	}
}
