package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/corralhq/corral/internal/model/modeltest"
)

// These tests drive multi-agent sessions (issue 22) through the official Go SDK against a real `corral serve`
// and the fake Messages API, which tells the threads' requests apart by their system prompts: each agent's
// prompt holds a marker of its own (ROLE-...), and the scripted turns match on it, and on what the request holds
// when the turn answers a message (a child's report). A request no turn matches gets the fake's default answer,
// "ok", which ends the turn: a coordinator that waits for its children is not scripted, as when it waits depends
// on how fast they are.

// multiE2E is one test's server, fake model and SDK client.
type multiE2E struct {
	t     *testing.T
	ctx   context.Context
	model *modeltest.Server
	c     anthropic.Client
	env   string
}

func newMultiE2E(t *testing.T, extra ...string) *multiE2E {
	t.Helper()
	model := modeltest.NewServer(t)
	s := startServer(t, t.TempDir(), model, extra...)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	t.Cleanup(cancel)
	m := &multiE2E{t: t, ctx: ctx, model: model, c: sdkClient(s)}
	env, err := m.c.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "multiagent"})
	if err != nil {
		t.Fatal(err)
	}
	m.env = env.ID
	return m
}

// toolset is the built-in toolset, all tools allowed.
func builtinTools() anthropic.BetaAgentNewParamsToolUnion {
	return anthropic.BetaAgentNewParamsToolUnion{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{}}
}

// agent creates an agent with the system prompt and tools.
func (m *multiE2E) agent(name, system string, tools ...anthropic.BetaAgentNewParamsToolUnion) string {
	m.t.Helper()
	a, err := m.c.Beta.Agents.New(m.ctx, anthropic.BetaAgentNewParams{Name: name, System: anthropic.String(system),
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-5"}, Tools: tools})
	if err != nil {
		m.t.Fatal(err)
	}
	return a.ID
}

// coordinator creates a multiagent_20261001 agent whose subagents are the roster, inline agents enabled or not.
func (m *multiE2E) coordinator(name, system string, inline bool, roster ...string) *anthropic.BetaManagedAgentsAgent {
	m.t.Helper()
	sub := &anthropic.BetaManagedAgentsMultiagentSubagentsEnabledParams{}
	for _, id := range roster {
		sub.PredefinedAgents = append(sub.PredefinedAgents, anthropic.BetaManagedAgentsMultiagentPredefinedAgentParamsUnion{OfString: anthropic.String(id)})
	}
	if inline {
		sub.InlineAgents.OfEnabled = &anthropic.BetaManagedAgentsMultiagentInlineAgentsEnabledParams{}
	} else {
		sub.InlineAgents.OfDisabled = &anthropic.BetaManagedAgentsMultiagentInlineAgentsDisabledParams{}
	}
	a, err := m.c.Beta.Agents.New(m.ctx, anthropic.BetaAgentNewParams{Name: name, System: anthropic.String(system),
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-5"},
		Multiagent: anthropic.BetaManagedAgentsMultiagentParamsUnion{OfMultiagent20261001: &anthropic.BetaManagedAgentsMultiagent20261001Params{
			Subagents: anthropic.BetaManagedAgentsMultiagentSubagentsParamsUnion{OfEnabled: sub}}}})
	if err != nil {
		m.t.Fatal(err)
	}
	return a
}

// session starts a session of the agent.
func (m *multiE2E) session(agentID string) string {
	m.t.Helper()
	sess, err := m.c.Beta.Sessions.New(m.ctx, anthropic.BetaSessionNewParams{
		Agent: anthropic.BetaSessionNewParamsAgentUnion{OfString: anthropic.String(agentID)}, EnvironmentID: m.env})
	if err != nil {
		m.t.Fatal(err)
	}
	return sess.ID
}

func (m *multiE2E) send(sid string, evs ...anthropic.BetaManagedAgentsEventParamsUnion) (*anthropic.BetaManagedAgentsSendSessionEvents, error) {
	return m.c.Beta.Sessions.Events.Send(m.ctx, sid, anthropic.BetaSessionEventSendParams{Events: evs})
}

func (m *multiE2E) say(sid, text string) {
	m.t.Helper()
	if _, err := m.send(sid, anthropic.BetaManagedAgentsEventParamsOfUserMessage(
		[]anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: text}}})); err != nil {
		m.t.Fatal(err)
	}
}

// events is the session's event list (the primary's events and the children's cross-posted ones).
func (m *multiE2E) events(sid string) []anthropic.BetaManagedAgentsSessionEventUnion {
	m.t.Helper()
	evs, _ := sdkEvents(m.ctx, m.t, m.c, sid)
	return evs
}

// threadEvents is a thread's own event list.
func (m *multiE2E) threadEvents(sid, thread string) []anthropic.BetaManagedAgentsSessionEventUnion {
	m.t.Helper()
	var evs []anthropic.BetaManagedAgentsSessionEventUnion
	iter := m.c.Beta.Sessions.Threads.Events.ListAutoPaging(m.ctx, thread, anthropic.BetaSessionThreadEventListParams{SessionID: sid})
	for iter.Next() {
		evs = append(evs, iter.Current())
	}
	if err := iter.Err(); err != nil {
		m.t.Fatal(err)
	}
	return evs
}

func (m *multiE2E) threads(sid string) []anthropic.BetaManagedAgentsSessionThread {
	m.t.Helper()
	var ths []anthropic.BetaManagedAgentsSessionThread
	iter := m.c.Beta.Sessions.Threads.ListAutoPaging(m.ctx, sid, anthropic.BetaSessionThreadListParams{})
	for iter.Next() {
		ths = append(ths, iter.Current())
	}
	if err := iter.Err(); err != nil {
		m.t.Fatal(err)
	}
	return ths
}

// thread is the session's child thread of the agent named name (the test fails if there is not exactly one).
func (m *multiE2E) thread(sid, name string) anthropic.BetaManagedAgentsSessionThread {
	m.t.Helper()
	var found []anthropic.BetaManagedAgentsSessionThread
	for _, th := range m.threads(sid) {
		if th.ParentThreadID != "" && th.Agent.Name == name {
			found = append(found, th)
		}
	}
	if len(found) != 1 {
		m.t.Fatalf("%d threads of agent %s", len(found), name)
	}
	return found[0]
}

// streamThread reads n events from a thread's stream opened with the Last-Event-ID.
func (m *multiE2E) streamThread(sid, thread, lastEventID string, n int) []anthropic.BetaManagedAgentsSessionEventUnion {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
	defer cancel()
	st := m.c.Beta.Sessions.Threads.Events.StreamEvents(ctx, thread, anthropic.BetaSessionThreadEventStreamParams{SessionID: sid},
		option.WithHeader("Last-Event-ID", lastEventID))
	defer st.Close()
	var out []anthropic.BetaManagedAgentsSessionEventUnion
	for len(out) < n && st.Next() {
		var ev anthropic.BetaManagedAgentsSessionEventUnion
		if err := json.Unmarshal([]byte(st.Current().RawJSON()), &ev); err != nil {
			m.t.Fatal(err)
		}
		out = append(out, ev)
	}
	if len(out) < n {
		m.t.Errorf("the stream of %s ended after %d of %d events: %v", thread, len(out), n, st.Err())
	}
	return out
}

func eventIDs(evs []anthropic.BetaManagedAgentsSessionEventUnion) []string {
	var ids []string
	for _, ev := range evs {
		ids = append(ids, ev.ID)
	}
	return ids
}

// waitEvents polls the session's events until done holds, and returns them.
func (m *multiE2E) waitEvents(sid, what string, done func([]anthropic.BetaManagedAgentsSessionEventUnion) bool) []anthropic.BetaManagedAgentsSessionEventUnion {
	m.t.Helper()
	for {
		evs := m.events(sid)
		if done(evs) {
			return evs
		}
		select {
		case <-m.ctx.Done():
			m.t.Fatalf("waiting for %s: %v\nevents:\n%s", what, m.ctx.Err(), dumpEvents(evs))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitIdle waits until the session's last event is its session.status_idle with the stop reason, and returns the
// events and that idle.
func (m *multiE2E) waitIdle(sid, reason string) ([]anthropic.BetaManagedAgentsSessionEventUnion, anthropic.BetaManagedAgentsSessionStatusIdleEvent) {
	m.t.Helper()
	evs := m.waitEvents(sid, "the session idle with "+reason, func(evs []anthropic.BetaManagedAgentsSessionEventUnion) bool {
		n := len(evs)
		return n > 0 && evs[n-1].Type == "session.status_idle" && evs[n-1].AsSessionStatusIdle().StopReason.Type == reason
	})
	return evs, evs[len(evs)-1].AsSessionStatusIdle()
}

// requests is the model requests so far whose system prompt holds the marker.
func (m *multiE2E) requests(marker string) []modeltest.Request {
	var out []modeltest.Request
	for _, r := range m.model.Requests() {
		if strings.Contains(r.System, marker) {
			out = append(out, r)
		}
	}
	return out
}

// role matches the model requests of the agent whose prompt holds the marker and whose body holds each of subs.
func byRole(marker string, subs ...string) func(*modeltest.Request) bool {
	return func(r *modeltest.Request) bool {
		if !strings.Contains(r.System, marker) {
			return false
		}
		for _, s := range subs {
			if !strings.Contains(string(r.Body), s) {
				return false
			}
		}
		return true
	}
}

// tool is a scripted turn of tool calls, each a name and its input as a Go value.
func callTurn(match func(*modeltest.Request) bool, calls ...any) modeltest.Turn {
	turn := modeltest.Turn{Match: match}
	for i := 0; i+1 < len(calls); i += 2 {
		in, err := json.Marshal(calls[i+1])
		if err != nil {
			panic(err)
		}
		turn.ToolUses = append(turn.ToolUses, modeltest.ToolUse{Name: calls[i].(string), Input: string(in)})
	}
	return turn
}

func textTurn(match func(*modeltest.Request) bool, s string) modeltest.Turn {
	return modeltest.Turn{Match: match, Text: s}
}

// toolResultBlocks is the tool_result blocks of a model request: what the model saw of its calls.
func toolResultBlocks(r modeltest.Request) []modeltest.Block {
	var out []modeltest.Block
	for _, msg := range r.Messages {
		for _, b := range msg.Content {
			if b.Type == "tool_result" {
				out = append(out, b)
			}
		}
	}
	return out
}

// blockText is a block's text, a tool_result's content joined.
func blockText(b modeltest.Block) string {
	var s strings.Builder
	s.WriteString(b.Text)
	for _, c := range b.Content {
		s.WriteString(c.Text)
	}
	return s.String()
}

// sawError reports whether one of the requests shows the model an error tool result holding want.
func sawError(reqs []modeltest.Request, want string) bool {
	for _, r := range reqs {
		for _, b := range toolResultBlocks(r) {
			if b.IsError && strings.Contains(blockText(b), want) {
				return true
			}
		}
	}
	return false
}

// evText is the text of an event's content blocks.
func evText(ev anthropic.BetaManagedAgentsSessionEventUnion) string {
	var v struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	_ = json.Unmarshal([]byte(ev.RawJSON()), &v)
	var s strings.Builder
	for _, c := range v.Content {
		s.WriteString(c.Text)
	}
	return s.String()
}

func dumpEvents(evs []anthropic.BetaManagedAgentsSessionEventUnion) string {
	var s strings.Builder
	for _, ev := range evs {
		s.WriteString(ev.RawJSON())
		s.WriteByte('\n')
	}
	return s.String()
}

func countType(evs []anthropic.BetaManagedAgentsSessionEventUnion, typ string) int {
	n := 0
	for _, ev := range evs {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

func evTypes(evs []anthropic.BetaManagedAgentsSessionEventUnion) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Type)
	}
	return out
}

// isBadRequest reports whether err is the API's 400 invalid_request_error and its body holds each of subs.
func isBadRequest(err error, subs ...string) bool {
	var aerr *anthropic.Error
	if !errors.As(err, &aerr) || aerr.StatusCode != http.StatusBadRequest || !strings.Contains(aerr.RawJSON(), "invalid_request_error") {
		return false
	}
	for _, s := range subs {
		if !strings.Contains(aerr.RawJSON(), s) {
			return false
		}
	}
	return true
}

// TestMultiagentSharedHands: a coordinator (created through the SDK with multiagent_20261001, two roster agents and
// inline agents enabled) starts the writer and an inline helper; the writer writes a file in /workspace with bash
// and reports back; then the coordinator starts the reader, which reads the file with bash and read. The children
// share the sandbox's filesystem but each has its own shell (the writer's cd and export stay in its shell). The
// threads list, each thread's full events, the session's condensed events and the one idle at the end say so.
func TestMultiagentSharedHands(t *testing.T) {
	t.Parallel()
	m := newMultiE2E(t)
	writer := m.agent("writer", "ROLE-WRITER: you write files.", builtinTools())
	reader := m.agent("reader", "ROLE-READER: you read files.", builtinTools())
	coord := m.coordinator("coordinator", "ROLE-COORD: you coordinate.", true, writer, reader)
	if got := coord.Multiagent.RawJSON(); !strings.Contains(got, "multiagent_20261001") || !strings.Contains(got, writer) ||
		!strings.Contains(got, reader) || !strings.Contains(got, `"inline_agents":{"type":"enabled"}`) {
		t.Fatalf("coordinator's multiagent %s", got)
	}
	sid := m.session(coord.ID)

	const content = "shared-hands-4f2a"
	m.model.Script(
		callTurn(byRole("ROLE-COORD"),
			"start_thread", map[string]any{"agent": "writer", "message": "Write the shared file."},
			"start_thread", map[string]any{"agent": map[string]any{"name": "helper", "system": "ROLE-INLINE: you help."}, "message": "Say hello."}),
		// The writer's report starts the reader.
		callTurn(byRole("ROLE-COORD", "WRITER-REPORT"), "start_thread", map[string]any{"agent": "reader", "message": "Read the shared file."}),
		textTurn(byRole("ROLE-COORD", "READER-REPORT"), "COORD-FINAL"),

		callTurn(byRole("ROLE-WRITER"), "bash", map[string]any{"command": "echo " + content + " > /workspace/shared.txt && cd /tmp && export MARK=writer-shell"}),
		callTurn(byRole("ROLE-WRITER"), "bash", map[string]any{"command": `echo "mark=[$MARK] cwd=$(pwd)"`}),
		textTurn(byRole("ROLE-WRITER"), "WRITER-REPORT: the file is written."),

		callTurn(byRole("ROLE-READER"), "bash", map[string]any{"command": `cat /workspace/shared.txt; echo "mark=[$MARK] cwd=$(pwd)"`}),
		callTurn(byRole("ROLE-READER"), "read", map[string]any{"file_path": "/workspace/shared.txt"}),
		textTurn(byRole("ROLE-READER"), "READER-REPORT: I read it."),

		textTurn(byRole("ROLE-INLINE"), "INLINE-REPORT: hello."),
	)
	m.say(sid, "Share the work.")
	evs, _ := m.waitIdle(sid, "end_turn")
	if n := countType(evs, "session.status_idle"); n != 1 {
		t.Errorf("the session idled %d times, want once, at the end: %v", n, evTypes(evs))
	}
	if n := m.model.Pending(); n != 0 {
		t.Errorf("%d scripted turns left unused", n)
	}

	// The threads: the primary, then the writer, the helper and the reader, all idle, their parent the primary.
	ths := m.threads(sid)
	if len(ths) != 4 {
		t.Fatalf("%d threads, want 4", len(ths))
	}
	primary := ths[0]
	if primary.ParentThreadID != "" || primary.Agent.Name != "coordinator" || primary.Agent.Type != "agent" || primary.Agent.ID != coord.ID ||
		!strings.HasPrefix(primary.ID, "sthr_") || primary.SessionID != sid {
		t.Errorf("primary %s", primary.RawJSON())
	}
	byName := map[string]anthropic.BetaManagedAgentsSessionThread{}
	for _, th := range ths {
		if th.Status != "idle" {
			t.Errorf("thread %s (%s) is %s, want idle", th.ID, th.Agent.Name, th.Status)
		}
		if th.ID == primary.ID {
			continue
		}
		byName[th.Agent.Name] = th
		if th.ParentThreadID != primary.ID || th.Usage.OutputTokens == 0 {
			t.Errorf("child %s", th.RawJSON())
		}
	}
	for name, want := range map[string]struct{ typ, id string }{"writer": {"agent", writer}, "reader": {"agent", reader}, "helper": {"inline", ""}} {
		th, ok := byName[name]
		if !ok || th.Agent.Type != want.typ || th.Agent.ID != want.id {
			t.Errorf("thread of %s: %s, want agent type %s", name, th.RawJSON(), want.typ)
		}
	}
	if th := byName["helper"]; th.Agent.System != "ROLE-INLINE: you help." {
		t.Errorf("inline agent %s", th.Agent.RawJSON())
	}
	// The writer was started before the reader, which started after the writer's report.
	if w, r := byName["writer"], byName["reader"]; !w.CreatedAt.Before(r.CreatedAt) {
		t.Errorf("writer created %v, reader %v", w.CreatedAt, r.CreatedAt)
	}
	// The session's usage is its threads' together.
	var in, out int64
	for _, th := range ths {
		in, out = in+th.Usage.InputTokens, out+th.Usage.OutputTokens
	}
	sess, err := m.c.Beta.Sessions.Get(m.ctx, sid, anthropic.BetaSessionGetParams{})
	if err != nil || sess.Status != "idle" || sess.Usage.InputTokens != in || sess.Usage.OutputTokens != out || out == 0 {
		t.Errorf("session %v: usage %s, the threads' %d in %d out", err, sess.Usage.RawJSON(), in, out)
	}
	got, err := m.c.Beta.Sessions.Threads.Get(m.ctx, byName["reader"].ID, anthropic.BetaSessionThreadGetParams{SessionID: sid})
	if err != nil || got.ID != byName["reader"].ID || got.Agent.Name != "reader" {
		t.Errorf("get the reader's thread: %v %+v", err, got)
	}
	idle, err := m.c.Beta.Sessions.Threads.List(m.ctx, sid, anthropic.BetaSessionThreadListParams{
		Statuses: []anthropic.BetaManagedAgentsSessionThreadStatus{"running"}})
	if err != nil || len(idle.Data) != 0 {
		t.Errorf("running threads: %v %d", err, len(idle.Data))
	}

	// Each child's own events are its full activity: its tool calls and results, its message, its report.
	report := map[string]string{"writer": "WRITER-REPORT", "reader": "READER-REPORT", "helper": "INLINE-REPORT"}
	outputs := map[string][]string{}
	for name, th := range byName {
		tevs := m.threadEvents(sid, th.ID)
		for _, r := range toolResults(tevs) {
			if r.isError {
				t.Errorf("%s: error result %s", name, r.text)
			}
			outputs[name] = append(outputs[name], r.text)
		}
		sent := 0
		for _, ev := range tevs {
			if ev.Type == "agent.thread_message_sent" {
				sent++
				if ev.ToSessionThreadID != primary.ID || !strings.Contains(evText(ev), report[name]) {
					t.Errorf("%s's report %s", name, ev.RawJSON())
				}
			}
		}
		if sent != 1 || countType(tevs, "session.thread_status_running") != 1 || countType(tevs, "session.thread_status_idle") != 1 ||
			countType(tevs, "agent.message") != 1 || countType(tevs, "span.model_request_end") == 0 {
			t.Errorf("%s's events: %v", name, evTypes(tevs))
		}
		if n := len(tevs); n == 0 || tevs[n-1].Type != "session.thread_status_idle" && tevs[n-1].Type != "agent.thread_message_sent" {
			t.Errorf("%s's events end with %v", name, evTypes(tevs))
		}
	}
	// A thread's stream replays its own events (Last-Event-ID: 0), then resumes after any of them.
	wevs := m.threadEvents(sid, byName["writer"].ID)
	if got := m.streamThread(sid, byName["writer"].ID, "0", len(wevs)); !slices.Equal(eventIDs(got), eventIDs(wevs)) {
		t.Errorf("the writer's stream %v, its list %v", evTypes(got), evTypes(wevs))
	}
	if got := m.streamThread(sid, byName["writer"].ID, wevs[1].ID, len(wevs)-2); !slices.Equal(eventIDs(got), eventIDs(wevs[2:])) {
		t.Errorf("the writer's stream resumed after its second event: %v, want %v", evTypes(got), evTypes(wevs[2:]))
	}
	// The writer's shell kept its cd and export; the reader's shell is another, over the same files.
	if w := outputs["writer"]; len(w) != 2 || !strings.Contains(w[1], "mark=[writer-shell] cwd=/tmp") {
		t.Errorf("writer's outputs %q", w)
	}
	r := outputs["reader"]
	if len(r) != 2 || !strings.Contains(r[0], content) || strings.Contains(r[0], "writer-shell") || strings.Contains(r[0], "cwd=/tmp") ||
		!strings.Contains(r[1], content) {
		t.Errorf("reader's outputs %q: want the writer's file, and a shell of its own", r)
	}
	if len(outputs["helper"]) != 0 {
		t.Errorf("helper's outputs %q", outputs["helper"])
	}

	// The session's events are the condensed view: the primary's own (its thread status events, the threads
	// created, the reports received) and the children's status events, cross-posted with their session_thread_id;
	// none of their tool calls.
	created := map[string]bool{}
	received := map[string]string{}
	status := map[string][]string{}
	for _, ev := range evs {
		switch ev.Type {
		case "session.thread_created":
			c := ev.AsSessionThreadCreated()
			created[c.SessionThreadID] = true
			if byName[c.AgentName].ID != c.SessionThreadID {
				t.Errorf("thread_created %s", ev.RawJSON())
			}
		case "agent.thread_message_received":
			received[ev.FromAgentName] = evText(ev)
			if byName[ev.FromAgentName].ID != ev.FromSessionThreadID {
				t.Errorf("message received %s", ev.RawJSON())
			}
		case "session.thread_status_running", "session.thread_status_idle":
			if ev.SessionThreadID == "" {
				t.Errorf("thread status without its thread: %s", ev.RawJSON())
			}
			status[ev.SessionThreadID] = append(status[ev.SessionThreadID], ev.Type)
		case "agent.tool_use":
			if ev.AsAgentToolUse().Name != "start_thread" || ev.SessionThreadID != "" {
				t.Errorf("a child's tool call on the session's stream: %s", ev.RawJSON())
			}
		case "agent.tool_result":
			if strings.Contains(evText(ev), content) || ev.SessionThreadID != "" {
				t.Errorf("a child's tool result on the session's stream: %s", ev.RawJSON())
			}
		case "agent.message":
			if evText(ev) != "COORD-FINAL" && evText(ev) != "ok" {
				t.Errorf("a child's message on the session's stream: %s", ev.RawJSON())
			}
		}
	}
	for name, th := range byName {
		if !created[th.ID] || !strings.Contains(received[name], report[name]) {
			t.Errorf("%s: created %v, report %q", name, created[th.ID], received[name])
		}
		if !slices.Equal(status[th.ID], []string{"session.thread_status_running", "session.thread_status_idle"}) {
			t.Errorf("%s's statuses on the session's stream: %v", name, status[th.ID])
		}
	}
	if n := len(status[primary.ID]); n < 2 || n%2 != 0 || status[primary.ID][n-1] != "session.thread_status_idle" {
		t.Errorf("the primary's statuses: %v", status[primary.ID])
	}
	// The primary thread's own events are the session's less the children's cross-posted ones: their two status
	// events each, and the session.usage after each of their model requests.
	childUsage := 0
	for _, ev := range evs {
		if ev.Type == "session.usage" && strings.Contains(ev.RawJSON(), `"session_thread_id"`) {
			childUsage++
		}
	}
	pevs := m.threadEvents(sid, primary.ID)
	if childUsage == 0 || len(pevs) != len(evs)-2*3-childUsage || countType(pevs, "session.thread_created") != 3 || countType(pevs, "agent.thread_message_received") != 3 ||
		countType(pevs, "session.status_idle") != 1 {
		t.Errorf("primary's events: %v", evTypes(pevs))
	}
	for _, ev := range pevs {
		if strings.HasPrefix(ev.Type, "session.thread_status_") && ev.SessionThreadID != primary.ID {
			t.Errorf("a child's status among the primary's own events: %s", ev.RawJSON())
		}
	}
	// The coordinator's model saw each report as a message of its own.
	reqs := m.requests("ROLE-COORD")
	if last := string(reqs[len(reqs)-1].Body); !strings.Contains(last, "WRITER-REPORT") || !strings.Contains(last, "READER-REPORT") ||
		!strings.Contains(last, "INLINE-REPORT") {
		t.Errorf("the coordinator's last request misses a report: %s", last)
	}
	if r := m.requests("ROLE-READER"); len(r) == 0 || !strings.Contains(r[0].LastUserText(), "Read the shared file.") {
		t.Errorf("the reader's first request: %+v", r)
	}
}

// TestMultiagentConfirmation: a child's always_ask bash call and its custom tool call wait for the client: each is
// cross-posted to the session's stream with its session_thread_id, the session idles with requires_action naming
// it, the client's answer (sent to the session) is routed to the child and its echo says so, and the child goes on
// and reports back. Once the child is archived, an answer to its calls is the API's 400.
func TestMultiagentConfirmation(t *testing.T) {
	t.Parallel()
	m := newMultiE2E(t)
	asker := m.agent("asker", "ROLE-ASKER: you ask first.",
		anthropic.BetaAgentNewParamsToolUnion{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{
			Configs: []anthropic.BetaManagedAgentsAgentToolConfigParamsUnion{{OfBash: &anthropic.BetaManagedAgentsBashToolConfigParams{
				PermissionPolicy: anthropic.BetaManagedAgentsBashToolConfigParamsPermissionPolicyUnion{OfAlwaysAsk: &anthropic.BetaManagedAgentsAlwaysAskPolicyParam{}}}}}}},
		anthropic.BetaAgentNewParamsToolUnion{OfCustom: &anthropic.BetaManagedAgentsCustomToolParams{Name: "lookup", Description: "Look a thing up.",
			InputSchema: anthropic.BetaManagedAgentsCustomToolInputSchemaParam{Properties: map[string]any{"q": map[string]any{"type": "string"}}}}})
	coord := m.coordinator("boss", "ROLE-COORD: you coordinate.", false, asker)
	sid := m.session(coord.ID)
	m.model.Script(
		callTurn(byRole("ROLE-COORD"), "start_thread", map[string]any{"agent": "asker", "message": "Do the careful thing."}),
		textTurn(byRole("ROLE-COORD"), "Waiting."),
		textTurn(byRole("ROLE-COORD", "ASKER-REPORT"), "COORD-FINAL"),
		callTurn(byRole("ROLE-ASKER"), "bash", map[string]any{"command": "echo confirmed-ran-$((40+2))"}),
		callTurn(byRole("ROLE-ASKER"), "lookup", map[string]any{"q": "the answer"}),
		textTurn(byRole("ROLE-ASKER", "LOOKUP-ANSWER-17"), "ASKER-REPORT: done."),
	)
	m.say(sid, "Go carefully.")

	// The bash call waits for a confirmation.
	evs, idle := m.waitIdle(sid, "requires_action")
	th := m.thread(sid, "asker")
	var bashUse anthropic.BetaManagedAgentsSessionEventUnion
	for _, ev := range evs {
		if ev.Type == "agent.tool_use" && ev.AsAgentToolUse().Name == "bash" {
			bashUse = ev
		}
	}
	if bashUse.ID == "" || bashUse.SessionThreadID != th.ID || bashUse.AsAgentToolUse().EvaluatedPermission != "ask" {
		t.Fatalf("the child's bash call on the session's stream: %q\n%s", bashUse.RawJSON(), dumpEvents(evs))
	}
	if !slices.Equal(idle.StopReason.EventIDs, []string{bashUse.ID}) {
		t.Fatalf("requires_action %v, want the bash call %s", idle.StopReason.EventIDs, bashUse.ID)
	}
	if got, err := m.c.Beta.Sessions.Threads.Get(m.ctx, th.ID, anthropic.BetaSessionThreadGetParams{SessionID: sid}); err != nil || got.Status != "idle" {
		t.Fatalf("the asking thread: %v %+v", err, got)
	}
	if n := len(m.requests("ROLE-ASKER")); n != 1 || len(toolResults(m.threadEvents(sid, th.ID))) != 0 {
		t.Fatalf("%d asker requests, %d tool results before the confirmation", n, len(toolResults(m.threadEvents(sid, th.ID))))
	}
	echo, err := m.send(sid, anthropic.BetaManagedAgentsEventParamsOfUserToolConfirmation(anthropic.BetaManagedAgentsUserToolConfirmationEventParamsResultAllow, bashUse.ID))
	if err != nil {
		t.Fatal(err)
	}
	if len(echo.Data) != 1 || echo.Data[0].SessionThreadID != th.ID {
		t.Fatalf("confirmation echo %s, want session_thread_id %s", echo.JSON.Data.Raw(), th.ID)
	}

	// Then the custom tool call waits for its result.
	var customUse anthropic.BetaManagedAgentsSessionEventUnion
	evs = m.waitEvents(sid, "the custom tool call", func(evs []anthropic.BetaManagedAgentsSessionEventUnion) bool {
		n := len(evs)
		if n == 0 || evs[n-1].Type != "session.status_idle" || evs[n-1].AsSessionStatusIdle().StopReason.Type != "requires_action" {
			return false
		}
		for _, ev := range evs {
			if ev.Type == "agent.custom_tool_use" {
				customUse = ev
			}
		}
		return customUse.ID != "" && slices.Equal(evs[n-1].AsSessionStatusIdle().StopReason.EventIDs, []string{customUse.ID})
	})
	if customUse.SessionThreadID != th.ID || customUse.AsAgentCustomToolUse().Name != "lookup" {
		t.Fatalf("custom tool use %s", customUse.RawJSON())
	}
	for _, ev := range evs {
		if ev.Type == "user.tool_confirmation" && ev.SessionThreadID != th.ID {
			t.Errorf("the stored confirmation %s, want session_thread_id %s", ev.RawJSON(), th.ID)
		}
	}
	result := anthropic.BetaManagedAgentsUserCustomToolResultEventParams{CustomToolUseID: customUse.ID,
		Content: []anthropic.BetaManagedAgentsUserCustomToolResultEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: "LOOKUP-ANSWER-17"}}}}
	echo, err = m.send(sid, anthropic.BetaManagedAgentsEventParamsUnion{OfUserCustomToolResult: &result})
	if err != nil {
		t.Fatal(err)
	}
	if len(echo.Data) != 1 || echo.Data[0].SessionThreadID != th.ID {
		t.Fatalf("custom tool result echo %s, want session_thread_id %s", echo.JSON.Data.Raw(), th.ID)
	}
	evs, _ = m.waitIdle(sid, "end_turn")
	if n := m.model.Pending(); n != 0 {
		t.Errorf("%d scripted turns left unused", n)
	}

	// The bash call ran in the child, after the confirmation; the custom result reached the child's model; the
	// child reported back.
	tevs := m.threadEvents(sid, th.ID)
	res := toolResults(tevs)
	if len(res) != 1 || res[0].isError || !strings.Contains(res[0].text, "confirmed-ran-42") {
		t.Errorf("the child's bash results %+v", res)
	}
	for _, typ := range []string{"user.tool_confirmation", "user.custom_tool_result", "agent.custom_tool_use", "agent.thread_message_sent"} {
		if countType(tevs, typ) != 1 {
			t.Errorf("the child's events: %d %s in %v", countType(tevs, typ), typ, evTypes(tevs))
		}
	}
	if countType(evs, "user.custom_tool_result") != 1 || countType(evs, "agent.tool_result") != 1 { // the start_thread result only
		t.Errorf("session events: %v", evTypes(evs))
	}
	if r := m.requests("ROLE-COORD"); !strings.Contains(string(r[len(r)-1].Body), "ASKER-REPORT") {
		t.Errorf("the coordinator's last request misses the report")
	}

	// An archived thread waits for nothing: an answer to one of its calls is the API's 400, naming the thread.
	if _, err := m.c.Beta.Sessions.Threads.Archive(m.ctx, th.ID, anthropic.BetaSessionThreadArchiveParams{SessionID: sid}); err != nil {
		t.Fatal(err)
	}
	_, err = m.send(sid, anthropic.BetaManagedAgentsEventParamsOfUserToolConfirmation(anthropic.BetaManagedAgentsUserToolConfirmationEventParamsResultAllow, bashUse.ID))
	if !isBadRequest(err, th.ID) {
		t.Errorf("a confirmation for an archived thread: %v, want a 400 naming it", err)
	}
	_, err = m.send(sid, anthropic.BetaManagedAgentsEventParamsUnion{OfUserCustomToolResult: &result})
	if !isBadRequest(err, th.ID) {
		t.Errorf("a custom tool result for an archived thread: %v, want a 400 naming it", err)
	}
}

// TestMultiagentInterruptThread: a user.interrupt with the session_thread_id of a child whose model call is in
// flight idles that child (end_turn, no report to its parent) while its sibling goes on and reports back.
func TestMultiagentInterruptThread(t *testing.T) {
	t.Parallel()
	m := newMultiE2E(t)
	slow := m.agent("slow", "ROLE-SLOW: you take your time.", builtinTools())
	fast := m.agent("fast", "ROLE-FAST: you are quick.", builtinTools())
	coord := m.coordinator("dispatcher", "ROLE-COORD: you dispatch.", false, slow, fast)
	sid := m.session(coord.ID)
	holdSlow, holdFast := make(chan struct{}), make(chan struct{})
	defer close(holdSlow)
	m.model.Script(
		callTurn(byRole("ROLE-COORD"),
			"start_thread", map[string]any{"agent": "slow", "message": "Take long."},
			"start_thread", map[string]any{"agent": "fast", "message": "Be quick."}),
		textTurn(byRole("ROLE-COORD", "FAST-REPORT"), "COORD-FINAL"),
		modeltest.Turn{Match: byRole("ROLE-SLOW"), Text: "SLOW-NEVER-FINISHED thinking it over", Hold: holdSlow},
		modeltest.Turn{Match: byRole("ROLE-FAST"), Text: "FAST-REPORT: quick.", Hold: holdFast},
	)
	m.say(sid, "Go.")
	// Both children's model calls are in flight.
	for len(m.requests("ROLE-SLOW")) == 0 || len(m.requests("ROLE-FAST")) == 0 {
		if err := m.model.WaitRequests(m.ctx, len(m.model.Requests())+1); err != nil {
			t.Fatal(err)
		}
	}
	slowTh, fastTh := m.thread(sid, "slow"), m.thread(sid, "fast")
	echo, err := m.send(sid, anthropic.BetaManagedAgentsEventParamsUnion{OfUserInterrupt: &anthropic.BetaManagedAgentsUserInterruptEventParams{
		SessionThreadID: anthropic.String(slowTh.ID)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(echo.Data) != 1 || echo.Data[0].SessionThreadID != slowTh.ID {
		t.Errorf("interrupt echo %s", echo.JSON.Data.Raw())
	}
	// The slow child idles; the fast one still runs, and the session with it.
	for {
		got, err := m.c.Beta.Sessions.Threads.Get(m.ctx, slowTh.ID, anthropic.BetaSessionThreadGetParams{SessionID: sid})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status == "idle" {
			break
		}
		select {
		case <-m.ctx.Done():
			t.Fatalf("the interrupted thread is %s", got.Status)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if got, err := m.c.Beta.Sessions.Threads.Get(m.ctx, fastTh.ID, anthropic.BetaSessionThreadGetParams{SessionID: sid}); err != nil || got.Status != "running" {
		t.Fatalf("the other thread: %v %+v", err, got.Status)
	}
	if sess, err := m.c.Beta.Sessions.Get(m.ctx, sid, anthropic.BetaSessionGetParams{}); err != nil || sess.Status != "running" {
		t.Fatalf("the session while a thread runs: %v %+v", err, sess.Status)
	}
	close(holdFast)
	evs, _ := m.waitIdle(sid, "end_turn")
	if n := countType(evs, "session.status_idle"); n != 1 {
		t.Errorf("the session idled %d times: %v", n, evTypes(evs))
	}

	// The slow thread's events show the interrupt and its end_turn idle; it sent its parent nothing.
	sevs := m.threadEvents(sid, slowTh.ID)
	var interrupted, idled bool
	for _, ev := range sevs {
		switch ev.Type {
		case "user.interrupt":
			interrupted = ev.SessionThreadID == slowTh.ID
		case "session.thread_status_idle":
			idled = interrupted && ev.AsSessionThreadStatusIdle().StopReason.Type == "end_turn"
		case "agent.thread_message_sent":
			t.Errorf("the interrupted thread reported: %s", ev.RawJSON())
		}
	}
	if !interrupted || !idled {
		t.Errorf("the interrupted thread's events:\n%s", dumpEvents(sevs))
	}
	fevs := m.threadEvents(sid, fastTh.ID)
	if countType(fevs, "user.interrupt") != 0 || countType(fevs, "agent.thread_message_sent") != 1 {
		t.Errorf("the other thread's events: %v", evTypes(fevs))
	}
	// On the session's stream: the interrupt (cross-posted), the slow thread's idle, the fast one's report.
	var sawInterrupt, sawSlowIdle bool
	for _, ev := range evs {
		switch {
		case ev.Type == "user.interrupt":
			sawInterrupt = ev.SessionThreadID == slowTh.ID
		case ev.Type == "session.thread_status_idle" && ev.SessionThreadID == slowTh.ID:
			sawSlowIdle = ev.AsSessionThreadStatusIdle().StopReason.Type == "end_turn"
		case ev.Type == "agent.thread_message_received" && ev.FromSessionThreadID == slowTh.ID:
			t.Errorf("the interrupted thread's report reached the coordinator: %s", ev.RawJSON())
		}
	}
	if !sawInterrupt || !sawSlowIdle {
		t.Errorf("session events: %v", evTypes(evs))
	}
	for _, r := range m.requests("ROLE-COORD") {
		if strings.Contains(string(r.Body), "SLOW-NEVER") {
			t.Errorf("the coordinator saw the interrupted thread's words")
		}
	}
	if r := m.requests("ROLE-COORD"); !strings.Contains(string(r[len(r)-1].Body), "FAST-REPORT") {
		t.Errorf("the coordinator's last request misses the fast report")
	}

	// A child that waits for a confirmation, interrupted: its call is closed with an error result and it idles
	// with end_turn without asking its model again; the session idles with end_turn, nothing left to answer.
	blocked := m.agent("blocked", "ROLE-BLOCKED: you ask.",
		anthropic.BetaAgentNewParamsToolUnion{OfAgentToolset20260401: &anthropic.BetaManagedAgentsAgentToolset20260401Params{
			Configs: []anthropic.BetaManagedAgentsAgentToolConfigParamsUnion{{OfBash: &anthropic.BetaManagedAgentsBashToolConfigParams{
				PermissionPolicy: anthropic.BetaManagedAgentsBashToolConfigParamsPermissionPolicyUnion{OfAlwaysAsk: &anthropic.BetaManagedAgentsAlwaysAskPolicyParam{}}}}}}})
	coord2 := m.coordinator("dispatcher2", "ROLE-COORD2: you dispatch.", false, blocked)
	sid = m.session(coord2.ID)
	m.model.Script(
		callTurn(byRole("ROLE-COORD2"), "start_thread", map[string]any{"agent": "blocked", "message": "Ask first."}),
		callTurn(byRole("ROLE-BLOCKED"), "bash", map[string]any{"command": "echo never-ran"}),
	)
	m.say(sid, "Go.")
	_, idle := m.waitIdle(sid, "requires_action")
	bth := m.thread(sid, "blocked")
	if _, err := m.send(sid, anthropic.BetaManagedAgentsEventParamsUnion{OfUserInterrupt: &anthropic.BetaManagedAgentsUserInterruptEventParams{
		SessionThreadID: anthropic.String(bth.ID)}}); err != nil {
		t.Fatal(err)
	}
	evs, _ = m.waitIdle(sid, "end_turn")
	bevs := m.threadEvents(sid, bth.ID)
	res := toolResults(bevs)
	if len(res) != 1 || !res[0].isError || res[0].text != "Tool execution was interrupted before completion. Please retry." {
		t.Errorf("the interrupted call's results %+v", res)
	}
	for _, ev := range bevs {
		if ev.Type == "agent.tool_result" && ev.AsAgentToolResult().ToolUseID != idle.StopReason.EventIDs[0] {
			t.Errorf("result %s, want one for %v", ev.RawJSON(), idle.StopReason.EventIDs)
		}
	}
	if n := len(m.requests("ROLE-BLOCKED")); n != 1 {
		t.Errorf("the interrupted thread sampled again: %d requests", n)
	}
	if n := len(bevs); n == 0 || bevs[n-1].Type != "session.thread_status_idle" || bevs[n-1].AsSessionThreadStatusIdle().StopReason.Type != "end_turn" ||
		countType(bevs, "agent.thread_message_sent") != 0 {
		t.Errorf("the interrupted thread's events: %v", evTypes(bevs))
	}
	if got, err := m.c.Beta.Sessions.Threads.Get(m.ctx, bth.ID, anthropic.BetaSessionThreadGetParams{SessionID: sid}); err != nil || got.Status != "idle" {
		t.Errorf("the interrupted thread: %v %+v", err, got)
	}
	// Its call is answered: a late confirmation is accepted (the brain keeps the first answer) and runs nothing.
	if _, err := m.send(sid, anthropic.BetaManagedAgentsEventParamsOfUserToolConfirmation(anthropic.BetaManagedAgentsUserToolConfirmationEventParamsResultAllow,
		idle.StopReason.EventIDs[0])); err != nil {
		t.Errorf("a late confirmation: %v", err)
	}
	late := m.waitEvents(sid, "the late confirmation processed", func(evs []anthropic.BetaManagedAgentsSessionEventUnion) bool {
		last := evs[len(evs)-1]
		return last.Type == "user.tool_confirmation" && !last.AsUserToolConfirmation().ProcessedAt.IsZero()
	})
	if len(late) != len(evs)+1 {
		t.Errorf("after the late confirmation: %v", evTypes(late[len(evs):]))
	}
	if res := toolResults(m.threadEvents(sid, bth.ID)); len(res) != 1 {
		t.Errorf("the interrupted call's results after a late confirmation %+v", res)
	}
}

// TestMultiagentBadInput: what a model asks wrongly of the thread tools is an error tool result the model sees in
// its next request: a start of an unknown roster name, an inline agent when inline agents are disabled, a child's
// start_thread (depth 1), a message to an archived thread.
func TestMultiagentBadInput(t *testing.T) {
	t.Parallel()
	m := newMultiE2E(t)
	worker := m.agent("worker", "ROLE-WORKER: you work.", builtinTools())
	coord := m.coordinator("strict", "ROLE-COORD: you are strict.", false, worker)
	if !strings.Contains(coord.Multiagent.RawJSON(), `"inline_agents":{"type":"disabled"}`) {
		t.Fatalf("multiagent %s", coord.Multiagent.RawJSON())
	}
	sid := m.session(coord.ID)
	m.model.Script(
		callTurn(byRole("ROLE-COORD"),
			"start_thread", map[string]any{"agent": "nobody", "message": "Do it."},
			"start_thread", map[string]any{"agent": map[string]any{"name": "improv", "system": "ROLE-IMPROV"}, "message": "Do it."},
			"start_thread", map[string]any{"agent": "worker", "message": "Work."}),
		textTurn(byRole("ROLE-COORD", "WORKER-REPORT"), "COORD-DONE"),
		callTurn(byRole("ROLE-WORKER"), "start_thread", map[string]any{"agent": "worker", "message": "Recurse."}),
		textTurn(byRole("ROLE-WORKER"), "WORKER-REPORT: no sub-threads for me."),
	)
	m.say(sid, "Try things.")
	m.waitIdle(sid, "end_turn")

	coordReqs, workerReqs := m.requests("ROLE-COORD"), m.requests("ROLE-WORKER")
	if len(coordReqs) < 2 || !sawError(coordReqs[1:2], `there is no agent named "nobody"`) || !sawError(coordReqs[1:2], `"worker"`) ||
		!sawError(coordReqs[1:2], "inline agents are disabled") {
		t.Errorf("the coordinator's second request does not show both refusals: %s", coordReqs[min(1, len(coordReqs)-1)].Body)
	}
	if len(workerReqs) < 2 || !sawError(workerReqs[1:2], "depth is 1") {
		t.Errorf("the worker's second request does not show the depth refusal")
	}
	ths := m.threads(sid)
	if len(ths) != 2 || len(m.requests("ROLE-IMPROV")) != 0 {
		t.Fatalf("%d threads, want the primary and the worker", len(ths))
	}
	wth := m.thread(sid, "worker")
	// The refusals are agent.tool_result events with is_error on the threads that called.
	var errs int
	for _, r := range toolResults(m.threadEvents(sid, ths[0].ID)) {
		if r.isError {
			errs++
		}
	}
	if errs != 2 {
		t.Errorf("%d error results on the primary, want 2", errs)
	}
	if res := toolResults(m.threadEvents(sid, wth.ID)); len(res) != 1 || !res[0].isError {
		t.Errorf("the worker's results %+v", res)
	}

	// A message to an archived thread.
	if _, err := m.c.Beta.Sessions.Threads.Archive(m.ctx, wth.ID, anthropic.BetaSessionThreadArchiveParams{SessionID: sid}); err != nil {
		t.Fatal(err)
	}
	_, err := m.c.Beta.Sessions.Threads.Archive(m.ctx, ths[0].ID, anthropic.BetaSessionThreadArchiveParams{SessionID: sid})
	if !isBadRequest(err) {
		t.Errorf("archive the primary: %v, want a 400", err)
	}
	m.model.Script(
		callTurn(byRole("ROLE-COORD", "MORE-WORK"), "send_thread_message", map[string]any{"session_thread_id": wth.ID, "message": "More."}),
		textTurn(byRole("ROLE-COORD", "MORE-WORK", "it takes no more messages"), "COORD-ACKS-ARCHIVED"),
	)
	m.say(sid, "MORE-WORK for the worker.")
	evs, _ := m.waitIdle(sid, "end_turn")
	coordReqs = m.requests("ROLE-COORD")
	if !sawError(coordReqs[len(coordReqs)-1:], "the thread "+wth.ID+" is archived: it takes no more messages") {
		t.Errorf("the coordinator's last request does not show the archived refusal: %s", coordReqs[len(coordReqs)-1].Body)
	}
	if n := m.model.Pending(); n != 0 {
		t.Errorf("%d scripted turns left unused", n)
	}
	var said string
	for _, ev := range evs {
		if ev.Type == "agent.message" {
			said = evText(ev)
		}
	}
	if said != "COORD-ACKS-ARCHIVED" {
		t.Errorf("the coordinator's last message %q", said)
	}
	if n := len(m.requests("ROLE-WORKER")); n != len(workerReqs) {
		t.Errorf("the archived worker ran again (%d requests, had %d)", n, len(workerReqs))
	}
	// A user.interrupt naming a thread of no session of this one is the API's 400.
	_, err = m.send(sid, anthropic.BetaManagedAgentsEventParamsUnion{OfUserInterrupt: &anthropic.BetaManagedAgentsUserInterruptEventParams{
		SessionThreadID: anthropic.String("sthr_nope")}})
	if !isBadRequest(err, "session_thread_id") {
		t.Errorf("interrupt of an unknown thread: %v", err)
	}
}

// TestMultiagentFailedChild: a child whose model requests fail past the retries (serve --model-retries 1) idles
// with retries_exhausted and reports to its parent as a failed child; the parent sees the failure in its next
// request and goes on: it starts the agent again, which works this time.
func TestMultiagentFailedChild(t *testing.T) {
	t.Parallel()
	m := newMultiE2E(t, "--model-retries", "1")
	flaky := m.agent("flaky", "ROLE-FLAKY: you are unreliable.", builtinTools())
	coord := m.coordinator("patient", "ROLE-COORD: you are patient.", false, flaky)
	sid := m.session(coord.ID)
	m.model.Script(
		callTurn(byRole("ROLE-COORD"), "start_thread", map[string]any{"agent": "flaky", "message": "Try once."}),
		callTurn(byRole("ROLE-COORD", "The thread failed"), "start_thread", map[string]any{"agent": "flaky", "message": "Try twice."}),
		textTurn(byRole("ROLE-COORD", "FLAKY-REPORT"), "COORD-DONE"),
		modeltest.Turn{Match: byRole("ROLE-FLAKY", "Try once."), Err: modeltest.ServerError()},
		modeltest.Turn{Match: byRole("ROLE-FLAKY", "Try once."), Err: modeltest.ServerError()},
		textTurn(byRole("ROLE-FLAKY", "Try twice."), "FLAKY-REPORT: worked this time."),
	)
	m.say(sid, "Persist.")
	evs, _ := m.waitIdle(sid, "end_turn")
	if n := countType(evs, "session.status_idle"); n != 1 {
		t.Errorf("the session idled %d times: %v", n, evTypes(evs))
	}
	if n := m.model.Pending(); n != 0 {
		t.Errorf("%d scripted turns left unused", n)
	}
	ths := m.threads(sid)
	if len(ths) != 3 {
		t.Fatalf("%d threads, want the primary and two of flaky", len(ths))
	}
	failed, worked := ths[1], ths[2] // by creation
	if failed.ID == "" || worked.ID == "" || failed.Agent.Name != "flaky" || worked.Agent.Name != "flaky" {
		t.Fatalf("threads %+v %+v", failed, worked)
	}
	fevs := m.threadEvents(sid, failed.ID)
	var errs []string
	var stop string
	for _, ev := range fevs {
		switch ev.Type {
		case "session.error":
			errs = append(errs, ev.AsSessionError().Error.RetryStatus.Type)
		case "session.thread_status_idle":
			stop = ev.AsSessionThreadStatusIdle().StopReason.Type
		}
	}
	if !slices.Equal(errs, []string{"retrying", "exhausted"}) || stop != "retries_exhausted" || countType(fevs, "session.thread_status_rescheduled") != 1 {
		t.Errorf("the failed thread's events:\n%s", dumpEvents(fevs))
	}
	// The failure is on the session's stream (the thread's idle, cross-posted) and reached the coordinator.
	var failure string
	for _, ev := range evs {
		if ev.Type == "session.thread_status_idle" && ev.SessionThreadID == failed.ID && ev.AsSessionThreadStatusIdle().StopReason.Type != "retries_exhausted" {
			t.Errorf("cross-posted idle %s", ev.RawJSON())
		}
		if ev.Type == "agent.thread_message_received" && ev.FromSessionThreadID == failed.ID {
			failure = evText(ev)
		}
	}
	if !strings.Contains(failure, "The thread failed") || !strings.Contains(failure, "retries are exhausted") {
		t.Errorf("the failed child's report %q", failure)
	}
	reqs := m.requests("ROLE-COORD")
	seen := false
	for _, r := range reqs {
		seen = seen || strings.Contains(string(r.Body), "retries are exhausted")
	}
	if !seen || !strings.Contains(string(reqs[len(reqs)-1].Body), "FLAKY-REPORT") {
		t.Errorf("the coordinator's requests: saw the failure %v; last %s", seen, reqs[len(reqs)-1].Body)
	}
}

// TestMultiagentAdvisor: an agent with the advisor enabled consults it: the question and its context go to the
// advisor's model, its answer comes back as the tool's result, and its usage counts in the session's.
func TestMultiagentAdvisor(t *testing.T) {
	t.Parallel()
	m := newMultiE2E(t)
	a, err := m.c.Beta.Agents.New(m.ctx, anthropic.BetaAgentNewParams{Name: "advised", System: anthropic.String("ROLE-ADVISED: you ask for advice."),
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-5"},
		Multiagent: anthropic.BetaManagedAgentsMultiagentParamsUnion{OfMultiagent20261001: &anthropic.BetaManagedAgentsMultiagent20261001Params{
			Advisor: anthropic.BetaManagedAgentsMultiagentAdvisorParamsOfEnabled("claude-opus-4-6")}}})
	if err != nil {
		t.Fatal(err)
	}
	sid := m.session(a.ID)
	advisor := func(r *modeltest.Request) bool { return r.Model == "claude-opus-4-6" }
	m.model.Script(
		callTurn(byRole("ROLE-ADVISED"), "consult_advisor", map[string]any{"question": "QUESTION-MARK?", "context": "CONTEXT-MARK"}),
		modeltest.Turn{Match: advisor, Text: "ADVICE-MARK: do it.", Usage: modeltest.Usage{InputTokens: 1000, OutputTokens: 100}},
		textTurn(byRole("ROLE-ADVISED", "ADVICE-MARK"), "ADVISED-DONE"),
	)
	m.say(sid, "Think hard.")
	evs, _ := m.waitIdle(sid, "end_turn")
	if n := m.model.Pending(); n != 0 {
		t.Fatalf("%d scripted turns left unused:\n%s", n, dumpEvents(evs))
	}
	var adv []modeltest.Request
	for _, r := range m.model.Requests() {
		if advisor(&r) {
			adv = append(adv, r)
		}
	}
	if len(adv) != 1 || strings.Contains(adv[0].System, "ROLE-ADVISED") || !strings.Contains(adv[0].LastUserText(), "QUESTION-MARK?") ||
		!strings.Contains(adv[0].LastUserText(), "CONTEXT-MARK") || len(adv[0].Tools) != 0 {
		t.Fatalf("advisor requests %+v", adv)
	}
	res := toolResults(evs)
	if len(res) != 1 || res[0].isError || res[0].text != "ADVICE-MARK: do it." {
		t.Errorf("consult_advisor results %+v", res)
	}
	// The session's usage is the agent's requests' (span.model_request_end) and the advisor's.
	var in, out int64
	for _, ev := range evs {
		if ev.Type == "span.model_request_end" {
			u := ev.AsSpanModelRequestEnd().ModelUsage
			in, out = in+u.InputTokens, out+u.OutputTokens
		}
	}
	sess, err := m.c.Beta.Sessions.Get(m.ctx, sid, anthropic.BetaSessionGetParams{})
	if err != nil || in == 0 || sess.Usage.InputTokens != in+1000 || sess.Usage.OutputTokens != out+100 {
		t.Errorf("session usage %s; the agent's spans %d in %d out, the advisor's 1000 in 100 out", sess.Usage.RawJSON(), in, out)
	}
}
