package harness_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model/modeltest"
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
	evs := f.waitFor(sid, "every thread done", func(evs []apitype.Event) bool {
		if !sessionIdle(evs) {
			return false
		}
		ths := f.threads(sid)
		done := len(ths) == 3
		for _, th := range ths {
			done = done && th.Status == apitype.StatusIdle
		}
		return done
	})

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
	want := []apitype.EventType{apitype.EventAgentThreadMessageReceived, apitype.EventSessionThreadStatusRunning, start, toolUse, end,
		toolResult, start, agentMsg, end, apitype.EventAgentThreadMessageSent, apitype.EventSessionThreadStatusIdle}
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
