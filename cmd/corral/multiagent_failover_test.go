package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/store/postgres/pgtest"
)

// The system prompts the fake model tells the threads' requests apart by.
const (
	coordinatorSystem = "You are COORDINATOR."
	alphaSystem       = "You are ALPHA."
	betaSystem        = "You are BETA."
	gammaSystem       = "You are GAMMA."
)

// bySystemPrompt matches the model requests of the thread whose system prompt starts with prompt.
func bySystemPrompt(prompt string) func(*modeltest.Request) bool {
	return func(r *modeltest.Request) bool { return strings.HasPrefix(r.System, prompt) }
}

// TestMultiAgentHarnessFailover is issue 22's crash test: `corral serve --brains 0` and two `corral harness`
// processes on one PostgreSQL (sharing one data directory, so that the session's workspace outlives the first).
// A coordinator starts three children (two roster agents and an inline one); each runs a bash command that
// appends its line to /workspace/runs.log, then alpha and beta are in the middle of a model call and gamma in
// the middle of a bash call when the brain holding the session is killed with SIGKILL. The other brain resumes
// every thread: alpha and beta ask the model again, gamma's cut call gets the "outcome is unknown" result and
// is not run again; each child runs one more command, finishes and reports to the coordinator, and the session
// ends idle once. Everything is read through the official Go SDK.
func TestMultiAgentHarnessFailover(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDSN(t)
	model := modeltest.NewServer(t)
	hold := make(chan struct{})
	defer close(hold)

	line := func(system, command string) modeltest.Turn {
		turn := bashTurn(t, command)
		turn.Match = bySystemPrompt(system)
		return turn
	}
	start := func(agent, message string) modeltest.ToolUse {
		in, err := json.Marshal(map[string]any{"agent": json.RawMessage(agent), "message": message})
		if err != nil {
			t.Fatal(err)
		}
		return modeltest.ToolUse{Name: "start_thread", Input: string(in)}
	}
	const runs = "/workspace/runs.log"
	model.Script(
		modeltest.Turn{Match: bySystemPrompt(coordinatorSystem), ToolUses: []modeltest.ToolUse{
			start(`"alpha"`, "Task for alpha."),
			start(`"beta"`, "Task for beta."),
			start(`{"name":"gamma","system":"`+gammaSystem+`"}`, "Task for gamma."),
		}},
		modeltest.Turn{Match: bySystemPrompt(coordinatorSystem), Text: "Waiting for my three children."},
		// Before the crash: one command each, then alpha and beta hold a model call and gamma a bash call.
		line(alphaSystem, "echo alpha-1 >> "+runs),
		line(betaSystem, "echo beta-1 >> "+runs),
		line(gammaSystem, "echo gamma-1 >> "+runs),
		modeltest.Turn{Match: bySystemPrompt(alphaSystem), Text: "alpha is thinking", Hold: hold},
		modeltest.Turn{Match: bySystemPrompt(betaSystem), Text: "beta is thinking", Hold: hold},
		// (a command that outlasts any wait for the others under load: the SIGKILL cuts it short)
		modeltest.Turn{Match: bySystemPrompt(gammaSystem), ToolUses: []modeltest.ToolUse{{Name: "bash",
			Input: `{"command":"echo gamma-2 >> ` + runs + ` && sleep 1800","timeout_ms":1800000}`}}},
		// After it, on the second brain: one more command each, and the report.
		line(alphaSystem, "echo alpha-2 >> "+runs),
		line(betaSystem, "echo beta-2 >> "+runs),
		line(gammaSystem, "echo gamma-3 >> "+runs),
		modeltest.Turn{Match: bySystemPrompt(alphaSystem), Text: "Alpha done."},
		modeltest.Turn{Match: bySystemPrompt(betaSystem), Text: "Beta done."},
		modeltest.Turn{Match: bySystemPrompt(gammaSystem), Text: "Gamma done."},
		// The coordinator's answers to the reports are the fake's default, "ok".
	)

	key := sharedVaultKey(t)
	api := startServer(t, t.TempDir(), model, "--db", db, "--brains", "0", "--vault-key-file", key)
	data := t.TempDir() // both brains': the workspace the first one's sandbox wrote is the second one's
	harness := func() *server {
		return startCorral(t, serverEnv(model, testKey), "corral: harness running", "harness", "--db", db, "--data", data,
			"--sandbox", sandboxKind(), "--images", "host", "--brains", "4", "--lease-ttl", "2s", "--poll", "200ms",
			"--vault-key-file", key)
	}
	first := harness()

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := sdkClient(api)
	sid := multiagentSession(ctx, t, c, rosterAgent{"alpha", alphaSystem}, rosterAgent{"beta", betaSystem})
	if _, err := c.Beta.Sessions.Events.Send(ctx, sid, anthropic.BetaSessionEventSendParams{
		Events: []anthropic.BetaManagedAgentsEventParamsUnion{anthropic.BetaManagedAgentsEventParamsOfUserMessage(
			[]anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: "Run the three tasks."}}})},
	}); err != nil {
		t.Fatal(err)
	}

	// Wait until all three children are mid-call: alpha's and beta's held model requests have arrived, and
	// gamma's command has written its line (it sleeps after).
	log := filepath.Join(data, "workspaces", sid, "runs.log")
	for {
		alpha, beta := 0, 0
		for _, r := range model.Requests() {
			switch {
			case bySystemPrompt(alphaSystem)(&r):
				alpha++
			case bySystemPrompt(betaSystem)(&r):
				beta++
			}
		}
		got, _ := os.ReadFile(log)
		if alpha >= 2 && beta >= 2 && strings.Contains(string(got), "gamma-2\n") {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the children did not all get mid-call: alpha %d and beta %d model requests, runs.log %q", alpha, beta, got)
		case <-first.exited:
			t.Fatalf("the first brain exited:\n%s", first.stderr.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	second := harness() // started only now, so the first one is the one holding the session
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.exited
	killed := time.Now()

	threads := waitThreadsDone(ctx, t, c, sid, 3)
	t.Logf("every thread finished on the second brain %v after the SIGKILL (lease TTL 2s)", time.Since(killed).Round(time.Millisecond))

	// No tool call ran twice: each command's line is in the shared workspace once, gamma-2 included (its call
	// was cut short, and not run again).
	got, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(got))
	slices.Sort(lines)
	if want := []string{"alpha-1", "alpha-2", "beta-1", "beta-2", "gamma-1", "gamma-2", "gamma-3"}; !slices.Equal(lines, want) {
		t.Errorf("runs.log holds %q, want each command's line once: %q", lines, want)
	}

	// Each child's transcript: whole and once.
	var primaryID string
	children := map[string]string{} // agent name -> thread id
	for _, th := range threads {
		if th.ParentThreadID == "" {
			primaryID = th.ID
			continue
		}
		children[th.Agent.Name] = th.ID
	}
	if primaryID == "" || len(children) != 3 {
		t.Fatalf("threads: primary %q, children %v", primaryID, children)
	}
	for name, want := range map[string]childWant{
		"alpha": {task: "Task for alpha.", report: "Alpha done.", commands: []string{"alpha-1", "alpha-2"}},
		"beta":  {task: "Task for beta.", report: "Beta done.", commands: []string{"beta-1", "beta-2"}},
		"gamma": {task: "Task for gamma.", report: "Gamma done.", commands: []string{"gamma-1", "gamma-2", "gamma-3"}, cut: "gamma-2"},
	} {
		id, ok := children[name]
		if !ok {
			t.Errorf("no child thread of %s: %v", name, children)
			continue
		}
		checkChildTranscript(t, name, threadEvents(ctx, t, c, sid, id), primaryID, want)
	}

	// The session's own stream: the three children created and their three reports received, once each, and
	// the session idle once, at the end.
	events, raw := sdkEvents(ctx, t, c, sid)
	checkUniqueIDs(t, "session", events)
	var typ []string
	for _, ev := range events {
		typ = append(typ, ev.Type)
	}
	reports := map[string]int{}
	for _, ev := range events {
		if ev.Type == "agent.thread_message_received" {
			for _, b := range ev.AsAgentThreadMessageReceived().Content {
				reports[b.Text]++
			}
		}
	}
	if n := countOf(typ, "session.thread_created"); n != 3 {
		t.Errorf("%d session.thread_created on the session's stream, want 3", n)
	}
	if want := map[string]int{"Alpha done.": 1, "Beta done.": 1, "Gamma done.": 1}; !maps.Equal(reports, want) {
		t.Errorf("reports the coordinator received: %v, want %v", reports, want)
	}
	// The takeover said so, once: a session.error from the brain, crash_recovered.
	for _, ev := range events {
		if ev.Type != "session.error" {
			continue
		}
		var e struct {
			Error struct {
				Source struct{ Component, Reason string } `json:"source"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(ev.RawJSON()), &e); err != nil || e.Error.Source.Component != "brain" || e.Error.Source.Reason != "crash_recovered" {
			t.Errorf("session.error %s, want one from the brain, crash_recovered", ev.RawJSON())
		}
	}
	if n := countOf(typ, "session.error"); n != 1 {
		t.Errorf("%d session.error on the session's stream, want 1 (the takeover's)", n)
	}
	if n := countOf(typ, "session.status_running"); n != 1 {
		t.Errorf("the session went running %d times, want once", n)
	}
	if n := countOf(typ, "session.status_idle"); n != 1 || typ[len(typ)-1] != "session.status_idle" {
		t.Errorf("the session idled %d times, want once, at the end: %v", n, typ)
	} else if r := events[len(events)-1].AsSessionStatusIdle().StopReason.Type; r != "end_turn" {
		t.Errorf("the session idled with %q, want end_turn", r)
	}
	if t.Failed() {
		t.Logf("session events:\n%s", raw)
	}

	// The coordinator's last request held each report once.
	var last *modeltest.Request
	for _, r := range model.Requests() {
		if bySystemPrompt(coordinatorSystem)(&r) {
			last = &r
		}
	}
	for _, report := range []string{"Alpha done.", "Beta done.", "Gamma done."} {
		if n := strings.Count(string(last.Body), report); n != 1 {
			t.Errorf("the coordinator's last model request holds %q %d times, want once", report, n)
		}
	}
	if strings.Contains(second.stderr.String(), "panic") {
		t.Errorf("second brain panicked:\n%s", second.stderr.String())
	}
}

// rosterAgent is an agent of a coordinator's roster.
type rosterAgent struct{ name, system string }

// multiagentSession creates through the SDK a coordinator (coordinatorSystem) whose roster is the agents given,
// with inline agents enabled (the default), every agent with the built-in toolset, and a session of it.
func multiagentSession(ctx context.Context, t *testing.T, c anthropic.Client, roster ...rosterAgent) string {
	t.Helper()
	toolset := []anthropic.BetaAgentNewParamsToolUnion{{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{}}}
	newAgent := func(name, system string, multi anthropic.BetaManagedAgentsMultiagentParamsUnion) string {
		a, err := c.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{
			Name: name, System: anthropic.String(system), Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-5"},
			Tools: toolset, Multiagent: multi,
		})
		if err != nil {
			t.Fatal(err)
		}
		return a.ID
	}
	var predefined []anthropic.BetaManagedAgentsMultiagentPredefinedAgentParamsUnion
	for _, a := range roster {
		predefined = append(predefined, anthropic.BetaManagedAgentsMultiagentPredefinedAgentParamsUnion{
			OfString: anthropic.String(newAgent(a.name, a.system, anthropic.BetaManagedAgentsMultiagentParamsUnion{}))})
	}
	coordinator := newAgent("coordinator", coordinatorSystem, anthropic.BetaManagedAgentsMultiagentParamsUnion{
		OfMultiagent20261001: &anthropic.BetaManagedAgentsMultiagent20261001Params{
			Subagents: anthropic.BetaManagedAgentsMultiagentSubagentsParamsUnion{OfEnabled: &anthropic.BetaManagedAgentsMultiagentSubagentsEnabledParams{
				PredefinedAgents: predefined,
			}},
		},
	})
	env, err := c.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "multiagent"})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := c.Beta.Sessions.New(ctx, anthropic.BetaSessionNewParams{
		Agent:         anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(coordinator)},
		EnvironmentID: env.ID,
	})
	if err != nil {
		t.Fatal(err)
	}
	return sess.ID
}

// waitThreadsDone lists the session's threads through the SDK until it has the children, all idle, and the
// session is idle; it returns the threads.
func waitThreadsDone(ctx context.Context, t *testing.T, c anthropic.Client, sid string, children int) []anthropic.BetaManagedAgentsSessionThread {
	t.Helper()
	for {
		var threads []anthropic.BetaManagedAgentsSessionThread
		iter := c.Beta.Sessions.Threads.ListAutoPaging(ctx, sid, anthropic.BetaSessionThreadListParams{})
		for iter.Next() {
			threads = append(threads, iter.Current())
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
		done := len(threads) == children+1
		for _, th := range threads {
			done = done && th.Status == "idle"
		}
		if done {
			sess, err := c.Beta.Sessions.Get(ctx, sid, anthropic.BetaSessionGetParams{})
			if err != nil {
				t.Fatal(err)
			}
			if sess.Status == "idle" {
				return threads
			}
		}
		select {
		case <-ctx.Done():
			var st []string
			for _, th := range threads {
				st = append(st, th.Agent.Name+":"+string(th.Status))
			}
			_, raw := sdkEvents(context.Background(), t, c, sid)
			t.Fatalf("the threads did not all finish: %v; session events:\n%s", st, raw)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// threadEvents lists a thread's events through the SDK.
func threadEvents(ctx context.Context, t *testing.T, c anthropic.Client, sid, threadID string) []anthropic.BetaManagedAgentsSessionEventUnion {
	t.Helper()
	var events []anthropic.BetaManagedAgentsSessionEventUnion
	iter := c.Beta.Sessions.Threads.Events.ListAutoPaging(ctx, threadID, anthropic.BetaSessionThreadEventListParams{SessionID: sid})
	for iter.Next() {
		events = append(events, iter.Current())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return events
}

// childWant is what a child's transcript must hold: its task, its report, the lines of its commands in order,
// and the command the crash cut short, if any.
type childWant struct {
	task, report string
	commands     []string
	cut          string
}

// checkChildTranscript checks a child's events after the crash: each event once; its task received once, first;
// its statuses from running to idle; each command's call once with one result (the cut one an error saying its
// outcome is unknown); one report, to the primary.
func checkChildTranscript(t *testing.T, name string, events []anthropic.BetaManagedAgentsSessionEventUnion, primaryID string, want childWant) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		var typ []string
		for _, ev := range events {
			typ = append(typ, ev.Type)
		}
		t.Errorf("%s: %s; events: %v", name, fmt.Sprintf(format, args...), typ)
	}
	checkUniqueIDs(t, name, events)
	if len(events) == 0 || events[0].Type != "agent.thread_message_received" {
		fail("the first event is not the task")
		return
	}
	var statuses []string
	tasks, sent, calls := 0, 0, map[string]string{} // calls: tool_use id -> command
	results := map[string][]anthropic.BetaManagedAgentsAgentToolResultEvent{}
	var commands []string
	for _, ev := range events {
		switch ev.Type {
		case "agent.thread_message_received":
			tasks++
			if m := ev.AsAgentThreadMessageReceived(); len(m.Content) != 1 || m.Content[0].Text != want.task || m.FromSessionThreadID != primaryID {
				fail("task %s", ev.RawJSON())
			}
		case "agent.thread_message_sent":
			sent++
			if m := ev.AsAgentThreadMessageSent(); len(m.Content) != 1 || m.Content[0].Text != want.report || m.ToSessionThreadID != primaryID {
				fail("report %s", ev.RawJSON())
			}
		case "agent.tool_use":
			u := ev.AsAgentToolUse()
			cmd, _ := u.Input["command"].(string)
			calls[u.ID] = cmd
			if f := strings.Fields(cmd); len(f) > 1 {
				commands = append(commands, f[1])
			}
		case "agent.tool_result":
			r := ev.AsAgentToolResult()
			results[r.ToolUseID] = append(results[r.ToolUseID], r)
		case "session.thread_status_running", "session.thread_status_idle", "session.thread_status_rescheduled", "session.thread_status_terminated":
			statuses = append(statuses, strings.TrimPrefix(ev.Type, "session.thread_status_"))
		}
	}
	if tasks != 1 || sent != 1 {
		fail("%d tasks received and %d reports sent, want 1 and 1", tasks, sent)
	}
	if !slices.Equal(commands, want.commands) {
		fail("commands %v, want each once, in order: %v", commands, want.commands)
	}
	for id, cmd := range calls {
		rs := results[id]
		if len(rs) != 1 {
			fail("%d results of the call %q, want 1", len(rs), cmd)
			continue
		}
		var text strings.Builder
		for _, b := range rs[0].Content {
			text.WriteString(b.Text)
		}
		cut := want.cut != "" && strings.Contains(cmd, want.cut+" ")
		switch {
		case cut && (!rs[0].IsError || !strings.Contains(text.String(), "outcome is unknown")):
			fail("the call the crash cut short (%q) got %s, want an error saying its outcome is unknown", cmd, rs[0].RawJSON())
		case !cut && rs[0].IsError:
			fail("the call %q failed: %s", cmd, text.String())
		}
	}
	if len(results) != len(calls) {
		fail("%d calls have results, of %d", len(results), len(calls))
	}
	// One turn, resumed by another brain: running first, idle last, never the same status twice in a row.
	if len(statuses) < 2 || statuses[0] != "running" || statuses[len(statuses)-1] != "idle" ||
		len(slices.Compact(slices.Clone(statuses))) != len(statuses) {
		fail("statuses %v, want running first, idle last, none repeated", statuses)
	}
}

// checkUniqueIDs fails the test when an event id appears twice.
func checkUniqueIDs(t *testing.T, what string, events []anthropic.BetaManagedAgentsSessionEventUnion) {
	t.Helper()
	seen := map[string]bool{}
	for _, ev := range events {
		if seen[ev.ID] {
			t.Errorf("%s: event id %s appears twice", what, ev.ID)
		}
		seen[ev.ID] = true
	}
}

// countOf counts typ in types.
func countOf(types []string, typ string) int {
	n := 0
	for _, s := range types {
		if s == typ {
			n++
		}
	}
	return n
}
