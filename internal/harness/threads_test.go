package harness_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/store"
)

// Prompts the fake model tells the threads' requests apart by.
const (
	coordinatorPrompt = "You are COORDINATOR."
	researcherPrompt  = "You are RESEARCHER."
	inlinePrompt      = "You are INLINE-HELPER."
)

// multiSession creates a multi-agent session as the API does: a multiagent_20261001 roster snapshot (a researcher
// agent, inline agents enabled, an advisor when advisor is set) and its primary thread. It returns the session
// and the primary thread's id.
func (f *fixture) multiSession(advisor string, tools ...apitype.Tool) (string, string) {
	f.t.Helper()
	ctx := context.Background()
	now := apitype.Now()
	env := &apitype.Environment{Type: apitype.ObjectEnvironment, ID: apitype.NewID(apitype.PrefixEnvironment), Name: "env-" + apitype.NewID(""),
		Config: apitype.EnvConfig{Type: "cloud"}, CreatedAt: now, UpdatedAt: now}
	if err := f.store.EnvironmentCreate(ctx, env); err != nil {
		f.t.Fatal(err)
	}
	researcher := apitype.ThreadAgent{Type: apitype.ThreadAgentAgent, ID: apitype.NewID(apitype.PrefixAgent), Version: 1, Name: "researcher",
		Description: "Finds things out.", System: researcherPrompt, Model: apitype.ModelConfig{ID: "claude-haiku-4-5"},
		Tools: []apitype.Tool{toolset}, MCPServers: []apitype.MCPServer{}, Skills: []apitype.SkillRef{}}
	adv := map[string]any{"type": "disabled"}
	if advisor != "" {
		adv = map[string]any{"type": "enabled", "model": advisor}
	}
	multi, err := json.Marshal(map[string]any{"type": "multiagent_20261001", "advisor": adv,
		"subagents": map[string]any{"type": "enabled", "inline_agents": map[string]any{"type": "enabled"}, "predefined_agents": []any{researcher}},
		"workflows": map[string]any{"type": "disabled"}})
	if err != nil {
		f.t.Fatal(err)
	}
	sess := &apitype.Session{
		Type: apitype.ObjectSession, ID: apitype.NewID(apitype.PrefixSession), EnvironmentID: env.ID, Status: apitype.StatusIdle,
		Agent: apitype.SessionAgent{
			Type: apitype.ObjectAgent, ID: apitype.NewID(apitype.PrefixAgent), Version: 1, Name: "coordinator",
			System: coordinatorPrompt, Model: apitype.ModelConfig{ID: "claude-sonnet-4-5"}, Tools: tools, Multiagent: multi,
		},
		CreatedAt: now, UpdatedAt: now,
	}
	primary := apitype.SessionThread{Type: apitype.ObjectSessionThread, ID: apitype.NewID(apitype.PrefixThread), SessionID: sess.ID,
		Status: apitype.StatusIdle, Agent: apitype.ThreadAgent{Type: apitype.ThreadAgentAgent, ID: sess.Agent.ID, Version: 1,
			Name: sess.Agent.Name, System: sess.Agent.System, Model: sess.Agent.Model, Tools: tools}, CreatedAt: now, UpdatedAt: now}
	if _, _, err := f.store.SessionCreate(ctx, &store.SessionCreateParams{Session: sess, Threads: []apitype.SessionThread{primary}}); err != nil {
		f.t.Fatal(err)
	}
	return sess.ID, primary.ID
}

// allEvents is every thread's events, in order.
func (f *fixture) allEvents(sessionID string) []apitype.Event {
	f.t.Helper()
	evs, err := f.store.EventList(context.Background(), &store.EventListParams{SessionID: sessionID, Scope: store.ScopeAll, Limit: 10000})
	if err != nil {
		f.t.Fatal(err)
	}
	return evs
}

func (f *fixture) threadEvents(sessionID, thread string) []apitype.Event {
	f.t.Helper()
	evs, err := f.store.EventList(context.Background(), &store.EventListParams{SessionID: sessionID, Scope: store.ScopeThread, Thread: thread, Limit: 10000})
	if err != nil {
		f.t.Fatal(err)
	}
	return evs
}

func (f *fixture) threads(sessionID string) []apitype.SessionThread {
	f.t.Helper()
	ths, err := f.store.ThreadList(context.Background(), &store.ThreadListParams{SessionID: sessionID, Limit: 100})
	if err != nil {
		f.t.Fatal(err)
	}
	return ths
}

// bySystem matches the model requests of one thread, by its system prompt.
func bySystem(prompt string) func(*modeltest.Request) bool {
	return func(r *modeltest.Request) bool { return strings.HasPrefix(r.System, prompt) }
}

// sessionIdle reports whether the session's stream ends with its idle.
func sessionIdle(evs []apitype.Event) bool { return len(evs) > 0 && evs[len(evs)-1].Type == idle }

// TestThreads: a coordinator starts a roster agent and an inline agent in one turn, ends its turn while they work,
// and gets each one's last message as a message of its own; the session runs until every thread is done. Each
// thread has its own model, prompt, tools and part of the log; the session's stream shows the children's status
// cross-posted; the threads' records follow.
func TestThreads(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sid, primaryID := f.multiSession("", toolset)
	f.srv.Script(
		modeltest.Turn{Match: bySystem(coordinatorPrompt), ToolUses: []modeltest.ToolUse{
			{Name: "start_thread", Input: `{"agent":"researcher","message":"Find the answer."}`},
			{Name: "start_thread", Input: `{"agent":{"name":"helper","system":"` + inlinePrompt + `"},"message":"Write the file."}`},
		}},
		modeltest.Turn{Match: bySystem(coordinatorPrompt), Text: "Waiting for my threads."},
		modeltest.Turn{Match: bySystem(researcherPrompt), ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"echo research"}`}}},
		modeltest.Turn{Match: bySystem(researcherPrompt), Text: "The answer is 42."},
		modeltest.Turn{Match: bySystem(inlinePrompt), Text: "File written."},
	)
	f.start(f.config())
	f.say(sid, "Coordinate the work.")
	evs := f.waitThreadsIdle(sid, 3)

	ths := f.threads(sid)
	if ths[0].ID != primaryID || !ths[0].Primary() {
		t.Fatalf("threads %+v: the primary first", ths)
	}
	byName := map[string]apitype.SessionThread{}
	for _, th := range ths[1:] {
		byName[th.Agent.Name] = th
		if th.ParentThreadID == nil || *th.ParentThreadID != primaryID || th.Usage == nil || th.Usage.OutputTokens == 0 || th.Stats == nil {
			t.Errorf("child %s: parent %v usage %+v stats %+v", th.Agent.Name, th.ParentThreadID, th.Usage, th.Stats)
		}
	}
	res, helper := byName["researcher"], byName["helper"]
	if res.Agent.Type != apitype.ThreadAgentAgent || res.Agent.Model.ID != "claude-haiku-4-5" || helper.Agent.Type != apitype.ThreadAgentInline ||
		helper.Agent.Model.ID != "claude-sonnet-4-5" {
		t.Fatalf("children's agents: %+v / %+v", res.Agent, helper.Agent)
	}

	// Each thread's requests: its own prompt and tools; the coordinator's offer the thread tools.
	var coordinatorSawAnswer, researcherSawTask bool
	for _, r := range f.srv.Requests() {
		names := toolNames(r)
		switch {
		case strings.HasPrefix(r.System, coordinatorPrompt):
			if !slices.Contains(names, "start_thread") || !slices.Contains(names, "send_thread_message") || slices.Contains(names, "consult_advisor") {
				t.Errorf("coordinator tools %v", names)
			}
			coordinatorSawAnswer = coordinatorSawAnswer || strings.Contains(string(r.Body), "The answer is 42.")
		case strings.HasPrefix(r.System, researcherPrompt):
			if r.Model != "claude-haiku-4-5" || slices.Contains(names, "start_thread") || !slices.Contains(names, "send_thread_message") {
				t.Errorf("researcher request: model %s tools %v", r.Model, names)
			}
			researcherSawTask = researcherSawTask || strings.Contains(string(r.Body), "Find the answer.")
		case strings.HasPrefix(r.System, inlinePrompt):
		default:
			t.Errorf("a request with an unknown system prompt %q", r.System)
		}
	}
	if !coordinatorSawAnswer {
		for _, e := range f.threadEvents(sid, "") {
			t.Logf("primary %d %s %s", e.Seq, e.Type, e.Data)
		}
		for _, r := range f.srv.Requests() {
			t.Logf("req system=%.20q msgs=%d", r.System, len(r.Messages))
		}
	}
	if !coordinatorSawAnswer || !researcherSawTask {
		t.Errorf("messages between threads: the coordinator saw the answer %v, the researcher its task %v", coordinatorSawAnswer, researcherSawTask)
	}

	// The researcher's part of the log: its whole turn, and its report to the coordinator.
	rev := f.threadEvents(sid, res.ID)
	want := []apitype.EventType{apitype.EventAgentThreadMessageReceived, apitype.EventSessionThreadStatusRunning, start, toolUse, end, usage,
		toolResult, start, agentMsg, end, usage, apitype.EventAgentThreadMessageSent, apitype.EventSessionThreadStatusIdle}
	if got := types(rev); !slices.Equal(got, want) {
		t.Fatalf("researcher's events:\n got %v\nwant %v", got, want)
	}
	if sent := decode[apitype.ThreadMessageSent](t, rev[len(rev)-2]); sent.ToSessionThreadID != primaryID || sent.ToAgentName != nil ||
		sent.Content[0].Text != "The answer is 42." {
		t.Errorf("report %+v", sent)
	}
	// The primary's part: two threads created, both reports received; the session's stream shows the children's
	// statuses (cross-posted, with session_thread_id) and not their work.
	primary := f.threadEvents(sid, "")
	if n := count(primary, apitype.EventSessionThreadCreated); n != 2 {
		t.Errorf("primary: %d thread_created", n)
	}
	if n := count(primary, apitype.EventAgentThreadMessageReceived); n != 2 {
		t.Errorf("primary: %d messages received", n)
	}
	if slices.ContainsFunc(evs, func(e apitype.Event) bool { return e.Thread != "" && !e.CrossPost }) || count(evs, apitype.EventSessionThreadStatusIdle) < 3 {
		t.Errorf("session stream: %v", types(evs))
	}
	for _, e := range evs {
		if e.CrossPost && decode[apitype.ThreadStatus](t, e).SessionThreadID != e.Thread {
			t.Errorf("cross-posted %s %s", e.Type, e.Data)
		}
	}
	// The session ran once and idled once: running while any thread ran.
	if count(evs, running) != 1 || count(evs, idle) != 1 {
		t.Errorf("session status events: %v", types(evs))
	}
	sess, err := f.store.SessionGet(context.Background(), sid)
	if err != nil || sess.Status != apitype.StatusIdle || sess.Usage.OutputTokens < res.Usage.OutputTokens+helper.Usage.OutputTokens {
		t.Errorf("session %v %+v", err, sess)
	}
	// Every thread's model request ends with the session's usage so far on the session's stream (the children's
	// cross-posted): one per request, the last reporting the session's total.
	var usages []apitype.Event
	for _, e := range evs {
		if e.Type == usage {
			usages = append(usages, e)
		}
	}
	if n := len(f.srv.Requests()); len(usages) != n || n < 5 {
		t.Fatalf("session stream: %d session.usage for %d model requests: %v", len(usages), n, types(evs))
	}
	if u := decode[apitype.SessionUsageEvent](t, usages[len(usages)-1]).Usage; u.InputTokens != sess.Usage.InputTokens || u.OutputTokens != sess.Usage.OutputTokens {
		t.Errorf("last session.usage %+v, session's %+v", u, sess.Usage)
	}
}

func toolNames(r modeltest.Request) []string {
	var out []string
	for _, tl := range r.Tools {
		out = append(out, tl.Name)
	}
	return out
}

func count(evs []apitype.Event, typ apitype.EventType) int {
	n := 0
	for _, e := range evs {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// runUntilIdle sends the coordinator a message and waits until the session and its threads (as many) are idle.
func (f *fixture) runUntilIdle(sid string, threads int) []apitype.Event {
	f.t.Helper()
	f.say(sid, "Coordinate the work.")
	return f.waitThreadsIdle(sid, threads)
}

// waitThreadsIdle waits until the session's stream ends with its idle and it has that many threads (0: any), all
// idle, and returns the session's stream.
func (f *fixture) waitThreadsIdle(sid string, threads int) []apitype.Event {
	f.t.Helper()
	return f.waitFor(sid, "every thread idle", func(evs []apitype.Event) bool {
		if !sessionIdle(evs) {
			return false
		}
		ths := f.threads(sid)
		done := threads == 0 || len(ths) == threads
		for _, th := range ths {
			done = done && th.Status == apitype.StatusIdle
		}
		return done
	})
}

// toolResultsOf is the text of every agent.tool_result of a thread's events, by the tool use's name.
func toolResultsOf(t *testing.T, evs []apitype.Event) map[string][]apitype.AgentToolResult {
	t.Helper()
	names := map[string]string{}
	out := map[string][]apitype.AgentToolResult{}
	for _, e := range evs {
		switch e.Type {
		case toolUse:
			names[e.ID] = decode[apitype.AgentToolUse](t, e).Name
		case toolResult:
			r := decode[apitype.AgentToolResult](t, e)
			out[names[r.ToolUseID]] = append(out[names[r.ToolUseID]], r)
		}
	}
	return out
}

// TestThreadsRefused: what the thread tools refuse comes back as error tool results the model can act on: an
// unknown roster name, an inline agent without a name, a message to a thread that is not the caller's, a child's
// start_thread (depth is 1), a message to an archived thread; and the coordinator's next request carries them.
func TestThreadsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sid, _ := f.multiSession("", toolset)
	f.srv.Script(
		modeltest.Turn{Match: bySystem(coordinatorPrompt), ToolUses: []modeltest.ToolUse{
			{Name: "start_thread", Input: `{"agent":"nobody","message":"x"}`},
			{Name: "start_thread", Input: `{"agent":{"system":"no name"},"message":"x"}`},
			{Name: "send_thread_message", Input: `{"session_thread_id":"sthr_nope","message":"x"}`},
			{Name: "start_thread", Input: `{"agent":"researcher","message":"Try to start a thread."}`},
		}},
		modeltest.Turn{Match: bySystem(researcherPrompt), ToolUses: []modeltest.ToolUse{{Name: "start_thread", Input: `{"agent":"self","message":"x"}`}}},
		modeltest.Turn{Match: bySystem(researcherPrompt), Text: "I cannot start threads."},
	)
	f.start(f.config())
	f.runUntilIdle(sid, 2)
	primary := toolResultsOf(t, f.threadEvents(sid, ""))
	starts, sends := primary["start_thread"], primary["send_thread_message"]
	if len(starts) != 3 || len(sends) != 1 {
		t.Fatalf("coordinator's results: %+v", primary)
	}
	for i, want := range []string{`no agent named "nobody"`, "name is required", ""} {
		if got := resultText(starts[i]); (want == "") == starts[i].IsError || !strings.Contains(got, want) {
			t.Errorf("start_thread %d: %v %q, want %q", i, starts[i].IsError, got, want)
		}
	}
	if !sends[0].IsError || !strings.Contains(resultText(sends[0]), "no thread") {
		t.Errorf("send_thread_message to nobody: %+v", sends[0])
	}
	child := f.threads(sid)[1]
	var refusal apitype.AgentToolUse
	for _, e := range f.threadEvents(sid, child.ID) {
		if e.Type == toolUse {
			refusal = decode[apitype.AgentToolUse](t, e)
		}
	}
	res := toolResultsOf(t, f.threadEvents(sid, child.ID))["start_thread"]
	if refusal.EvaluatedPermission != apitype.PermissionDeny || len(res) != 1 || !res[0].IsError || !strings.Contains(resultText(res[0]), "depth is 1") {
		t.Errorf("a child's start_thread: %+v, results %+v", refusal, res)
	}
	// The refusals reached the models that made the calls.
	var sawUnknown, sawDepth bool
	for _, r := range f.srv.Requests() {
		sawUnknown = sawUnknown || (strings.HasPrefix(r.System, coordinatorPrompt) && strings.Contains(string(r.Body), `no agent named \"nobody\"`))
		sawDepth = sawDepth || (strings.HasPrefix(r.System, researcherPrompt) && strings.Contains(string(r.Body), "depth is 1"))
	}
	if !sawUnknown || !sawDepth {
		t.Errorf("refusals seen by the models: coordinator %v, child %v", sawUnknown, sawDepth)
	}

	// Archived: the coordinator's message to it is refused.
	if _, err := f.store.ThreadArchive(context.Background(), sid, child.ID, func(*apitype.SessionThread) error { return nil }); err != nil {
		t.Fatal(err)
	}
	f.srv.Script(modeltest.Turn{Match: bySystem(coordinatorPrompt), ToolUses: []modeltest.ToolUse{
		{Name: "send_thread_message", Input: `{"session_thread_id":"` + child.ID + `","message":"more"}`}}})
	f.say(sid, "Message the archived one.")
	f.waitFor(sid, "the refusal", func([]apitype.Event) bool {
		s := toolResultsOf(t, f.threadEvents(sid, ""))["send_thread_message"]
		return len(s) == 2 && s[1].IsError && strings.Contains(resultText(s[1]), "archived")
	})
}

// TestThreadsLimit: at most 25 threads run at once, the primary included: the 25th start_thread of a turn whose
// 24 children all run is refused, and the children finish.
func TestThreadsLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sid, _ := f.multiSession("", toolset)
	hold := make(chan struct{})
	var starts []modeltest.ToolUse
	for range 25 {
		starts = append(starts, modeltest.ToolUse{Name: "start_thread", Input: `{"agent":"researcher","message":"Work."}`})
	}
	turns := []modeltest.Turn{{Match: bySystem(coordinatorPrompt), ToolUses: starts}}
	for range 24 {
		turns = append(turns, modeltest.Turn{Match: bySystem(researcherPrompt), Text: "done", Hold: hold})
	}
	f.srv.Script(turns...)
	f.start(f.config())
	f.say(sid, "Start many.")
	f.waitFor(sid, "25 start_thread results", func([]apitype.Event) bool {
		return len(toolResultsOf(t, f.threadEvents(sid, ""))["start_thread"]) == 25
	})
	res := toolResultsOf(t, f.threadEvents(sid, ""))["start_thread"]
	for i, r := range res {
		if want := i == 24; r.IsError != want || (want && !strings.Contains(resultText(r), "25 threads")) {
			t.Errorf("start_thread %d: %v %s", i, r.IsError, resultText(r))
		}
	}
	close(hold)
	f.waitThreadsIdle(sid, 25)
	if n := count(f.threadEvents(sid, ""), apitype.EventAgentThreadMessageReceived); n != 24 {
		t.Errorf("%d reports, want 24", n)
	}
}

// TestThreadFailed: a child whose model fails for good reports to its parent as failed, and the parent goes on.
func TestThreadFailed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sid, _ := f.multiSession("", toolset)
	f.srv.Script(
		modeltest.Turn{Match: bySystem(coordinatorPrompt), ToolUses: []modeltest.ToolUse{{Name: "start_thread", Input: `{"agent":"researcher","message":"Work."}`}}},
		modeltest.Turn{Match: bySystem(coordinatorPrompt), Text: "Waiting."},
		modeltest.Turn{Match: bySystem(researcherPrompt), Err: modeltest.Invalid("the child's request is bad")},
		modeltest.Turn{Match: bySystem(coordinatorPrompt), Text: "The researcher failed; I will do it myself."},
	)
	f.start(f.config())
	f.runUntilIdle(sid, 2)
	child := f.threads(sid)[1]
	cev := f.threadEvents(sid, child.ID)
	last := cev[len(cev)-1]
	if last.Type != apitype.EventSessionThreadStatusIdle || decode[apitype.ThreadStatus](t, last).StopReason.Type != apitype.StopRetriesExhausted {
		t.Fatalf("child's events %v", types(cev))
	}
	var report apitype.ThreadMessageReceived
	for _, e := range f.threadEvents(sid, "") {
		if e.Type == apitype.EventAgentThreadMessageReceived {
			report = decode[apitype.ThreadMessageReceived](t, e)
		}
	}
	if report.FromSessionThreadID != child.ID || !strings.Contains(report.Content[0].Text, "The thread failed") ||
		!strings.Contains(report.Content[0].Text, "the child's request is bad") {
		t.Errorf("report %+v", report)
	}
	reqs := f.srv.Requests()
	if last := reqs[len(reqs)-1]; !strings.HasPrefix(last.System, coordinatorPrompt) || !strings.Contains(string(last.Body), "The thread failed") {
		t.Errorf("the coordinator's last request: %.200s", last.Body)
	}
}

// TestThreadsInterrupt: an interrupt with no session_thread_id reaches every thread: the children's held model
// calls end, nothing is reported back (the coordinator is not woken), and the session idles once more.
func TestThreadsInterrupt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sid, _ := f.multiSession("", toolset)
	hold := make(chan struct{})
	defer close(hold)
	f.srv.Script(
		modeltest.Turn{Match: bySystem(coordinatorPrompt), ToolUses: []modeltest.ToolUse{
			{Name: "start_thread", Input: `{"agent":"researcher","message":"One."}`},
			{Name: "start_thread", Input: `{"agent":"researcher","message":"Two."}`}}},
		modeltest.Turn{Match: bySystem(coordinatorPrompt), Text: "Waiting."},
		modeltest.Turn{Match: bySystem(researcherPrompt), Text: "partial one", Hold: hold},
		modeltest.Turn{Match: bySystem(researcherPrompt), Text: "partial two", Hold: hold},
	)
	f.start(f.config())
	f.say(sid, "Go.")
	f.waitCalls(sid, 4) // the coordinator's two, and each child's held one
	before := len(f.srv.Requests())
	f.send(sid, interrupt, apitype.UserInterrupt{})
	f.waitThreadsIdle(sid, 0)
	for _, th := range f.threads(sid)[1:] {
		evs := f.threadEvents(sid, th.ID)
		last := evs[len(evs)-1]
		if count(evs, interrupt) != 1 || last.Type != apitype.EventSessionThreadStatusIdle ||
			decode[apitype.ThreadStatus](t, last).StopReason.Type != apitype.StopEndTurn || count(evs, apitype.EventAgentThreadMessageSent) != 0 {
			t.Errorf("child %s: %v", th.ID, types(evs))
		}
	}
	if n := len(f.srv.Requests()); n != before {
		t.Errorf("%d model requests after the interrupt", n-before)
	}
}

// TestThreadsAdvisor: with an advisor, the coordinator consults it with consult_advisor: a request to the
// advisor's model, whose answer is the tool's result and whose usage the session's counts.
func TestThreadsAdvisor(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sid, _ := f.multiSession("claude-opus-4-5", toolset)
	f.srv.Script(
		modeltest.Turn{Match: bySystem(coordinatorPrompt), ToolUses: []modeltest.ToolUse{
			{Name: "consult_advisor", Input: `{"question":"Which way?","context":"Two roads."}`}}},
		modeltest.Turn{Match: func(r *modeltest.Request) bool { return r.Model == "claude-opus-4-5" }, Text: "Take the left road.",
			Usage: modeltest.Usage{InputTokens: 1000, OutputTokens: 100}},
		modeltest.Turn{Match: bySystem(coordinatorPrompt), Text: "Left it is."},
	)
	f.start(f.config())
	f.runUntilIdle(sid, 1)
	res := toolResultsOf(t, f.threadEvents(sid, ""))["consult_advisor"]
	if len(res) != 1 || res[0].IsError || resultText(res[0]) != "Take the left road." {
		t.Fatalf("consult_advisor results %+v", res)
	}
	// The advisor's answer comes with the session's usage, its request counted.
	primary := f.threadEvents(sid, "")
	for i, e := range primary {
		if e.Type == toolResult && resultText(decode[apitype.AgentToolResult](t, e)) == "Take the left road." {
			if i+1 == len(primary) || primary[i+1].Type != usage ||
				decode[apitype.SessionUsageEvent](t, primary[i+1]).Usage.InputTokens < 1000 {
				t.Errorf("after the advisor's answer: %v", types(primary[i+1:]))
			}
		}
	}
	var asked bool
	for _, r := range f.srv.Requests() {
		asked = asked || (r.Model == "claude-opus-4-5" && strings.Contains(string(r.Body), "Two roads.") && strings.Contains(string(r.Body), "Which way?"))
	}
	sess, err := f.store.SessionGet(context.Background(), sid)
	if err != nil || !asked || sess.Usage.InputTokens < 1000 || sess.Usage.OutputTokens < 100 {
		t.Errorf("advisor asked %v; session usage %+v (%v)", asked, sess.Usage, err)
	}
}

// TestThreadsResume: a brain that stops while two children's model calls are in flight hands the session back;
// another brain resumes every thread from its own events: the children's calls are made again, each child reports
// once, and the session idles.
func TestThreadsResume(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sid, _ := f.multiSession("", toolset)
	hold := make(chan struct{})
	defer close(hold)
	f.srv.Script(
		modeltest.Turn{Match: bySystem(coordinatorPrompt), ToolUses: []modeltest.ToolUse{
			{Name: "start_thread", Input: `{"agent":"researcher","message":"One."}`},
			{Name: "start_thread", Input: `{"agent":{"name":"helper","system":"` + inlinePrompt + `"},"message":"Two."}`}}},
		modeltest.Turn{Match: bySystem(coordinatorPrompt), Text: "Waiting."},
		modeltest.Turn{Match: bySystem(researcherPrompt), Text: "cut short", Hold: hold},
		modeltest.Turn{Match: bySystem(inlinePrompt), Text: "cut short", Hold: hold},
		modeltest.Turn{Match: bySystem(researcherPrompt), Text: "one done"},
		modeltest.Turn{Match: bySystem(inlinePrompt), Text: "two done"},
	)
	first := newBrain(t, f.config())
	if err := first.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.say(sid, "Go.")
	f.waitCalls(sid, 4)
	first.Stop()
	if evs := f.events(sid); evs[len(evs)-1].Type != resched {
		t.Fatalf("after the stop: %v", types(evs))
	}
	f.start(f.config())
	f.waitThreadsIdle(sid, 0)
	ths := f.threads(sid)
	if len(ths) != 3 {
		t.Fatalf("%d threads", len(ths))
	}
	ids := map[string]bool{}
	for _, e := range f.allEvents(sid) {
		if ids[e.ID] {
			t.Errorf("event %s twice", e.ID)
		}
		ids[e.ID] = true
	}
	for _, th := range ths[1:] {
		evs := f.threadEvents(sid, th.ID)
		if count(evs, apitype.EventAgentThreadMessageReceived) != 1 || count(evs, apitype.EventAgentThreadMessageSent) != 1 {
			t.Errorf("child %s: %v", th.Agent.Name, types(evs))
		}
	}
	var got []string
	for _, e := range f.threadEvents(sid, "") {
		if e.Type == apitype.EventAgentThreadMessageReceived {
			got = append(got, decode[apitype.ThreadMessageReceived](t, e).Content[0].Text)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"one done", "two done"}) {
		t.Errorf("reports %q", got)
	}
}

// TestThreadSandboxFailed: a child whose sandbox dies under a tool call goes on (the next call gets a fresh one),
// and its report tells the parent that its work may be partial.
func TestThreadSandboxFailed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.hands.run = func(context.Context, *sandbox.Call) (sandbox.Result, error) {
		return sandbox.Result{}, fmt.Errorf("the sandbox went away: %w", sandbox.ErrSandboxDead)
	}
	sid, _ := f.multiSession("", toolset)
	f.srv.Script(
		modeltest.Turn{Match: bySystem(coordinatorPrompt), ToolUses: []modeltest.ToolUse{{Name: "start_thread", Input: `{"agent":"researcher","message":"Work."}`}}},
		modeltest.Turn{Match: bySystem(coordinatorPrompt), Text: "Waiting."},
		modeltest.Turn{Match: bySystem(researcherPrompt), ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"make"}`}}},
		modeltest.Turn{Match: bySystem(researcherPrompt), Text: "Built, I think."},
	)
	f.start(f.config())
	f.runUntilIdle(sid, 2)
	var report string
	for _, e := range f.threadEvents(sid, "") {
		if e.Type == apitype.EventAgentThreadMessageReceived {
			for _, c := range decode[apitype.ThreadMessageReceived](t, e).Content {
				report += c.Text + "\n"
			}
		}
	}
	if !strings.Contains(report, "[The sandbox failed while this thread worked (sandbox_died)") || !strings.Contains(report, "Built, I think.") {
		t.Errorf("report %q", report)
	}
}

// TestThreadsBudget: a session's budget is shared by its threads: a child's request crosses it, the child and
// then the coordinator idle with budget_reached (the session too), and raising the budget resumes both.
func TestThreadsBudget(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	sid, _ := f.multiSession("", toolset)
	ctx := context.Background()
	if _, err := f.store.SessionUpdate(ctx, sid, func(s *apitype.Session) error {
		s.Budget = json.RawMessage(`{"type":"limit","max_list_cost":{"amount":"1","currency":"USD"}}`)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	small := modeltest.Usage{InputTokens: 10, OutputTokens: 10}
	f.srv.Script(
		modeltest.Turn{Match: bySystem(coordinatorPrompt), Usage: small,
			ToolUses: []modeltest.ToolUse{{Name: "start_thread", Input: `{"agent":"researcher","message":"Work."}`}}},
		modeltest.Turn{Match: bySystem(coordinatorPrompt), Text: "Waiting.", Usage: small},
		// claude-haiku-4-5 at $1 and $5 per million: 1.1 cents, past the 1-cent cap.
		modeltest.Turn{Match: bySystem(researcherPrompt), Usage: modeltest.Usage{InputTokens: 1000, OutputTokens: 2000},
			ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"ls"}`}}},
		modeltest.Turn{Match: bySystem(researcherPrompt), Text: "Found it.", Usage: small},
	)
	f.start(f.config())
	evs := f.runUntilIdle(sid, 2)
	if r := stopReason(t, evs[len(evs)-1]); r.Type != apitype.StopBudgetReached {
		t.Fatalf("the session idled with %+v, want budget_reached", r)
	}
	child := f.threads(sid)[1]
	cev := f.threadEvents(sid, child.ID)
	if last := cev[len(cev)-1]; decode[apitype.ThreadStatus](t, last).StopReason.Type != apitype.StopBudgetReached {
		t.Fatalf("child: %v", types(cev))
	}
	requests := len(f.srv.Requests())
	sess, err := f.store.SessionGet(ctx, sid)
	if err != nil || sess.Usage.ListCostPicodollars < 1_100_000_000_0 {
		t.Fatalf("session usage %+v (%v)", sess.Usage, err)
	}

	// Raised as the API does: both threads resume, the child's paused turn first.
	if _, err := f.store.SessionUpdate(ctx, sid, func(s *apitype.Session) error {
		s.Budget = json.RawMessage(`{"type":"limit","max_list_cost":{"amount":"100","currency":"USD"}}`)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.EventAppend(ctx, &store.EventAppendParams{SessionID: sid, Wake: true, Events: []apitype.NewEvent{{
		Type: apitype.EventSessionUpdated, Processed: true,
		Data: json.RawMessage(`{"budget":{"type":"limit","max_list_cost":{"amount":"100","currency":"USD"}}}`)}}}); err != nil {
		t.Fatal(err)
	}
	evs = f.waitFor(sid, "the resumed work", func(evs []apitype.Event) bool {
		return sessionIdle(evs) && stopReason(t, evs[len(evs)-1]).Type == apitype.StopEndTurn
	})
	if n := count(evs, idle); n != 2 {
		t.Errorf("the session idled %d times, want twice (at the budget, at the end): %v", n, types(evs))
	}
	var reports []string
	for _, e := range f.threadEvents(sid, "") {
		if e.Type == apitype.EventAgentThreadMessageReceived {
			reports = append(reports, decode[apitype.ThreadMessageReceived](t, e).Content[0].Text)
		}
	}
	if len(f.srv.Requests()) <= requests || len(reports) != 2 || !strings.Contains(reports[0], "budget") || reports[1] != "Found it." {
		t.Errorf("after the raise: %d requests (was %d), reports %q", len(f.srv.Requests()), requests, reports)
	}
}
