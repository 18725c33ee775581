package harness_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/harness"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/model/anthropic"
	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/host"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Event type shorthands for expected sequences.
const (
	userMsg     = apitype.EventUserMessage
	running     = apitype.EventSessionStatusRunning
	idle        = apitype.EventSessionStatusIdle
	resched     = apitype.EventSessionStatusRescheduled
	sessErr     = apitype.EventSessionError
	start       = apitype.EventSpanModelRequestStart
	end         = apitype.EventSpanModelRequestEnd
	usage       = apitype.EventSessionUsage
	agentMsg    = apitype.EventAgentMessage
	toolUse     = apitype.EventAgentToolUse
	customUse   = apitype.EventAgentCustomToolUse
	toolResult  = apitype.EventAgentToolResult
	interrupt   = apitype.EventUserInterrupt
	compacted   = apitype.EventAgentContextCompacted
	confirm     = apitype.EventUserToolConfirmation
	customReply = apitype.EventUserCustomToolResult
)

// fixture is a store in a temp dir, a fake model server behind the real Anthropic adapter, and fake hands.
type fixture struct {
	t     *testing.T
	store *sqlite.Store
	srv   *modeltest.Server
	model model.Model
	hands *fakeHands
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	srv := modeltest.NewServer(t)
	return &fixture{
		t: t, store: st, srv: srv,
		model: anthropic.New(anthropic.Config{APIKey: "test-key", BaseURL: srv.URL}),
		hands: &fakeHands{},
	}
}

// config is a brain configuration for tests: short leases, fast polling, millisecond backoff.
func (f *fixture) config() harness.Config {
	return harness.Config{
		Store: f.store, Model: f.model, Hands: f.hands, Workers: 2,
		LeaseTTL: 3 * time.Second, PollInterval: 20 * time.Millisecond,
		Retry: harness.RetryPolicy{MaxRetries: 2, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond},
	}
}

// newBrain returns a brain for cfg, which must be valid.
func newBrain(t *testing.T, cfg harness.Config) *harness.Brain {
	t.Helper()
	b, err := harness.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// start starts a brain that the test's cleanup stops.
func (f *fixture) start(cfg harness.Config) *harness.Brain {
	f.t.Helper()
	b := newBrain(f.t, cfg)
	if err := b.Start(context.Background()); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(b.Stop)
	return b
}

var toolset = apitype.Tool{Type: apitype.ToolTypeAgentToolset}

// session creates a session whose agent has the tools.
func (f *fixture) session(tools ...apitype.Tool) string {
	f.t.Helper()
	ctx := context.Background()
	now := apitype.Now()
	env := &apitype.Environment{Type: apitype.ObjectEnvironment, ID: apitype.NewID(apitype.PrefixEnvironment), Name: "env-" + apitype.NewID(""),
		Config: apitype.EnvConfig{Type: "cloud"}, CreatedAt: now, UpdatedAt: now}
	if err := f.store.EnvironmentCreate(ctx, env); err != nil {
		f.t.Fatal(err)
	}
	sess := &apitype.Session{
		Type: apitype.ObjectSession, ID: apitype.NewID(apitype.PrefixSession), EnvironmentID: env.ID, Status: apitype.StatusIdle,
		Agent: apitype.SessionAgent{
			Type: apitype.ObjectAgent, ID: apitype.NewID(apitype.PrefixAgent), Version: 1, Name: "tester",
			System: "You are a test agent.", Model: apitype.ModelConfig{ID: "claude-sonnet-4-5"}, Tools: tools,
		},
		CreatedAt: now, UpdatedAt: now,
	}
	if _, _, err := f.store.SessionCreate(ctx, &store.SessionCreateParams{Session: sess}); err != nil {
		f.t.Fatal(err)
	}
	return sess.ID
}

// send appends a client event the way the API does: unprocessed, waking the session.
func (f *fixture) send(sessionID string, typ apitype.EventType, payload any) apitype.Event {
	f.t.Helper()
	ev, err := apitype.MakeEvent(typ, payload)
	if err != nil {
		f.t.Fatal(err)
	}
	out, err := f.store.EventAppend(context.Background(), &store.EventAppendParams{
		SessionID: sessionID, Events: []apitype.NewEvent{ev}, Wake: true,
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return out[0]
}

func (f *fixture) say(sessionID, text string) apitype.Event {
	return f.send(sessionID, userMsg, apitype.UserMessage{Content: []apitype.ContentBlock{apitype.TextBlock(text)}})
}

func (f *fixture) events(sessionID string) []apitype.Event {
	f.t.Helper()
	evs, err := f.store.EventList(context.Background(), &store.EventListParams{SessionID: sessionID, Limit: 10000})
	if err != nil {
		f.t.Fatal(err)
	}
	return evs
}

// waitFor polls the log until cond holds.
func (f *fixture) waitFor(sessionID, what string, cond func([]apitype.Event) bool) []apitype.Event {
	f.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		evs := f.events(sessionID)
		if cond(evs) {
			return evs
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("timed out waiting for %s; log: %v", what, types(evs))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitIdle waits until the log holds n session.status_idle events and ends with one.
func (f *fixture) waitIdle(sessionID string, n int) []apitype.Event {
	f.t.Helper()
	return f.waitFor(sessionID, fmt.Sprintf("idle #%d", n), func(evs []apitype.Event) bool {
		c := 0
		for _, e := range evs {
			if e.Type == idle {
				c++
			}
		}
		return c >= n && evs[len(evs)-1].Type == idle
	})
}

// waitCalls waits until the model has received n requests and the session's log (every thread's part) holds n
// span.model_request_start events: a request goes out while its start is appended (see thread.call), so a
// test that acts on the log mid-call waits for both.
func (f *fixture) waitCalls(sessionID string, n int) {
	f.t.Helper()
	f.waitRequests(n)
	deadline := time.Now().Add(15 * time.Second)
	for {
		evs, err := f.store.EventList(context.Background(), &store.EventListParams{SessionID: sessionID, Scope: store.ScopeAll, Limit: 10000})
		if err != nil {
			f.t.Fatal(err)
		}
		if len(ofType(evs, start)) >= n {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("timed out waiting for %d request starts; log: %v", n, types(evs))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (f *fixture) waitRequests(n int) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := f.srv.WaitRequests(ctx, n); err != nil {
		f.t.Fatalf("waiting for %d model requests: %v", n, err)
	}
}

func types(evs []apitype.Event) []apitype.EventType {
	out := make([]apitype.EventType, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

func assertTypes(t *testing.T, evs []apitype.Event, want ...apitype.EventType) {
	t.Helper()
	if got := types(evs); !slices.Equal(got, want) {
		t.Fatalf("event types:\n got %v\nwant %v", got, want)
	}
}

func decode[T any](t *testing.T, e apitype.Event) T {
	t.Helper()
	var v T
	if err := e.DecodeData(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// assertStop checks that ev is an idle whose stop_reason has type want.
func assertStop(t *testing.T, ev apitype.Event, want apitype.StopReasonType) {
	t.Helper()
	if r := stopReason(t, ev); r.Type != want {
		t.Errorf("stop_reason = %+v, want %s", r, want)
	}
}

func stopReason(t *testing.T, e apitype.Event) apitype.StopReason {
	t.Helper()
	if e.Type != idle {
		t.Fatalf("event %s is not an idle", e.Type)
	}
	return decode[apitype.SessionIdle](t, e).StopReason
}

func resultText(r apitype.AgentToolResult) string {
	var sb strings.Builder
	for _, c := range r.Content {
		sb.WriteString(c.Text)
	}
	return sb.String()
}

// lastToolResult returns the last tool_result block of a model request.
func lastToolResult(t *testing.T, req modeltest.Request) modeltest.Block {
	t.Helper()
	for i := len(req.Messages) - 1; i >= 0; i-- {
		for _, b := range slices.Backward(req.Messages[i].Content) {
			if b.Type == "tool_result" {
				return b
			}
		}
	}
	t.Fatalf("request has no tool_result: %+v", req.Messages)
	return modeltest.Block{}
}

func blockText(b modeltest.Block) string {
	var sb strings.Builder
	sb.WriteString(b.Text)
	for _, c := range b.Content {
		sb.WriteString(c.Text)
	}
	return sb.String()
}

// fakeHands runs built-in tools in the test: by default it echoes the call.
type fakeHands struct {
	mu    sync.Mutex
	calls []string
	run   func(ctx context.Context, call *sandbox.Call) (sandbox.Result, error)
}

// Tools are the in-sandbox agent's: the model is offered the real definitions.
func (h *fakeHands) Tools() []sandbox.Tool { return host.Tools() }

func (h *fakeHands) Execute(ctx context.Context, call *sandbox.Call) (sandbox.Result, error) {
	h.mu.Lock()
	h.calls = append(h.calls, call.Name+" "+string(call.Input))
	run := h.run
	h.mu.Unlock()
	if run != nil {
		return run(ctx, call)
	}
	return sandbox.Result{Content: []apitype.ContentBlock{apitype.TextBlock("ran " + call.Name)}}, nil
}

func (h *fakeHands) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.calls)
}

// TestLifecycle: New reports an invalid configuration, a brain starts once, and Stop is idempotent, safe before
// Start and final.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for name, mutate := range map[string]func(*harness.Config){
		"no store":         func(c *harness.Config) { c.Store = nil },
		"no model":         func(c *harness.Config) { c.Model = nil },
		"negative workers": func(c *harness.Config) { c.Workers = -1 },
		"short lease":      func(c *harness.Config) { c.LeaseTTL = time.Millisecond },
		"thinking budget":  func(c *harness.Config) { c.ThinkingBudget = harness.DefaultMaxTokens },
	} {
		cfg := f.config()
		mutate(&cfg)
		if b, err := harness.New(cfg); err == nil || b != nil {
			t.Errorf("%s: New = %v, %v; want an error", name, b, err)
		}
	}

	b := newBrain(t, f.config())
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err == nil {
		t.Error("second Start succeeded")
	}
	b.Stop()
	b.Stop() // idempotent
	if err := b.Start(context.Background()); err == nil {
		t.Error("Start after Stop succeeded")
	}

	never := newBrain(t, f.config())
	never.Stop() // before Start: returns at once
	if err := never.Start(context.Background()); err == nil {
		t.Error("Start after Stop (before any Start) succeeded")
	}
}

func TestTextTurn(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.Script(modeltest.Turn{Text: "Hello there.", Usage: modeltest.Usage{InputTokens: 11, OutputTokens: 3, CacheReadInputTokens: 2}})
	f.start(f.config())
	id := f.session()
	f.say(id, "hi")

	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, userMsg, running, start, agentMsg, end, usage, idle)
	if evs[0].ProcessedAt == nil {
		t.Error("user.message has no processed_at")
	}
	if msg := decode[apitype.AgentMessage](t, evs[3]); len(msg.Content) != 1 || msg.Content[0].Text != "Hello there." {
		t.Errorf("agent.message = %+v", msg)
	}
	span := decode[apitype.SpanModelRequestEnd](t, evs[4])
	if span.ModelRequestStartID != evs[2].ID || span.IsError || span.ModelUsage.InputTokens != 11 {
		t.Errorf("span.model_request_end = %+v", span)
	}
	assertStop(t, evs[6], apitype.StopEndTurn)
	reqs := f.srv.Requests()
	if len(reqs) != 1 || reqs[0].System != "You are a test agent." || reqs[0].Model != "claude-sonnet-4-5" ||
		reqs[0].LastUserText() != "hi" || !reqs[0].Stream || len(reqs[0].Tools) != 0 {
		t.Errorf("request = %+v", reqs)
	}
	sess, err := f.store.SessionGet(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if sess.Stats.ActiveSeconds <= 0 {
		t.Errorf("active seconds = %v", sess.Stats.ActiveSeconds)
	}
	if sess.Status != apitype.StatusIdle || sess.Usage.InputTokens != 11 || sess.Usage.OutputTokens != 3 || sess.Usage.CacheReadInputTokens != 2 {
		t.Errorf("session status %q usage %+v", sess.Status, sess.Usage)
	}
}

func TestToolTurn(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.Script(
		modeltest.Turn{Text: "Let me look.", ToolUses: []modeltest.ToolUse{{ID: "toolu_1", Name: "bash", Input: `{"command":"ls"}`}}},
		modeltest.Turn{Text: "Done."},
	)
	f.start(f.config())
	id := f.session(toolset)
	f.say(id, "list the files")

	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, userMsg, running, start, agentMsg, toolUse, end, usage, toolResult, start, agentMsg, end, usage, idle)
	use := decode[apitype.AgentToolUse](t, evs[4])
	if use.Name != "bash" || use.EvaluatedPermission != "allow" || use.Evaluation == nil ||
		use.Evaluation.Type != apitype.PolicyAlwaysAllow || use.ModelToolUseID != "toolu_1" || string(use.Input) != `{"command":"ls"}` {
		t.Errorf("agent.tool_use = %+v", use)
	}
	res := decode[apitype.AgentToolResult](t, evs[7])
	if res.ToolUseID != evs[4].ID || res.IsError || resultText(res) != "ran bash" {
		t.Errorf("agent.tool_result = %+v", res)
	}
	reqs := f.srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests", len(reqs))
	}
	var names []string
	for _, tl := range reqs[0].Tools {
		names = append(names, tl.Name)
	}
	if want := []string{"bash", "edit", "read", "write", "glob", "grep"}; !slices.Equal(names, want) {
		t.Errorf("tools = %v, want %v", names, want)
	}
	// The model sees the hands' definitions as they declare them.
	for i, tl := range reqs[0].Tools {
		if d := host.Tools()[i]; tl.Description != d.Description || !jsonEqual(t, tl.InputSchema, d.InputSchema) {
			t.Errorf("tool %d = %+v, want the hands' %+v", i, tl, d)
		}
	}
	tr := lastToolResult(t, reqs[1])
	if tr.ToolUseID != "toolu_1" || tr.IsError || blockText(tr) != "ran bash" {
		t.Errorf("second request's tool_result = %+v", tr)
	}
	assertStop(t, evs[12], apitype.StopEndTurn)
}

func TestQueuedMessagePickedUpAtNextCall(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	hold := make(chan struct{})
	f.srv.Script(
		modeltest.Turn{Text: "Checking.", ToolUses: []modeltest.ToolUse{{ID: "toolu_1", Name: "read", Input: `{"file_path":"a"}`}}, Hold: hold},
		modeltest.Turn{Text: "Both done."},
	)
	f.start(f.config())
	id := f.session(toolset)
	f.say(id, "first")
	f.waitCalls(id, 1)
	queued := f.say(id, "second, while you work")
	if queued.ProcessedAt != nil {
		t.Fatal("a queued message is processed at append")
	}
	close(hold)

	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, userMsg, running, start, userMsg, agentMsg, toolUse, end, usage, toolResult, start, agentMsg, end, usage, idle)
	if evs[3].ProcessedAt == nil || evs[3].ProcessedAt.Before(*evs[0].ProcessedAt) {
		t.Errorf("queued message processed_at = %v (first at %v)", evs[3].ProcessedAt, evs[0].ProcessedAt)
	}
	reqs := f.srv.Requests()
	if got := reqs[0].LastUserText(); got != "first" {
		t.Errorf("first call's user text = %q", got)
	}
	last := reqs[1].Messages[len(reqs[1].Messages)-1]
	if last.Role != "user" || len(last.Content) != 2 || last.Content[0].Type != "tool_result" || last.Content[1].Text != "second, while you work" {
		t.Errorf("second call's last turn = %+v", last)
	}
}

// A message that arrives while the last model call of a turn runs is not lost when the turn's last append
// releases the session: its wake-up keeps the session runnable, and it gets a turn of its own.
func TestMessageDuringLastCallGetsATurn(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	hold := make(chan struct{})
	f.srv.Script(modeltest.Turn{Text: "One.", Hold: hold}, modeltest.Turn{Text: "Two."})
	f.start(f.config())
	id := f.session()
	f.say(id, "first")
	f.waitCalls(id, 1)
	f.say(id, "second, while you answer")
	close(hold)

	evs := f.waitIdle(id, 2)
	assertTypes(t, evs, userMsg, running, start, userMsg, agentMsg, end, usage, idle, running, start, agentMsg, end, usage, idle)
	if evs[3].ProcessedAt == nil {
		t.Error("the second message was never processed")
	}
	if got := f.srv.Requests()[1].LastUserText(); got != "second, while you answer" {
		t.Errorf("second call's user text = %q", got)
	}
}

func TestRetriesThenSuccess(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.Script(
		modeltest.Turn{Err: modeltest.Overloaded()},
		modeltest.Turn{Err: modeltest.Overloaded()},
		modeltest.Turn{Text: "Finally."},
	)
	f.start(f.config())
	id := f.session()
	f.say(id, "hi")

	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, userMsg, running,
		start, end, sessErr, resched, running,
		start, end, sessErr, resched, running,
		start, agentMsg, end, usage, idle)
	for _, i := range []int{4, 9} {
		e := decode[apitype.SessionError](t, evs[i]).Error
		if e.Type != apitype.SessionErrModelOverloaded || e.RetryStatus.Type != "retrying" || e.Message == "" {
			t.Errorf("session.error = %+v", e)
		}
		if span := decode[apitype.SpanModelRequestEnd](t, evs[i-1]); !span.IsError || span.ModelRequestStartID != evs[i-2].ID {
			t.Errorf("failed span end = %+v", span)
		}
	}
	if r := stopReason(t, evs[len(evs)-1]); r.Type != apitype.StopEndTurn {
		t.Errorf("stop_reason = %+v", r)
	}
}

// A model stream that stalls is cut after ModelTimeout and retried like a dropped connection.
func TestStalledModelCallRetried(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	stall := make(chan struct{})
	defer close(stall)
	f.srv.Script(modeltest.Turn{Text: "stalls after this", Hold: stall}, modeltest.Turn{Text: "Recovered."})
	cfg := f.config()
	cfg.ModelTimeout = 300 * time.Millisecond
	f.start(cfg)
	id := f.session()
	f.say(id, "hi")
	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, userMsg, running, start, end, sessErr, resched, running, start, agentMsg, end, usage, idle)
	e := decode[apitype.SessionError](t, evs[4]).Error
	if e.Type != apitype.SessionErrModelRequestFailed ||
		e.RetryStatus.Type != "retrying" || !strings.Contains(e.Message, "no complete answer within 300ms") {
		t.Errorf("session.error = %+v", e)
	}
	if want := (apitype.FailureSource{Component: apitype.ComponentModel, Backend: "anthropic", Reason: apitype.ReasonTimeout}); e.Source == nil || *e.Source != want {
		t.Errorf("stalled call's source = %+v, want %+v", e.Source, want)
	}
}

func TestRetriesExhausted(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.Script(
		modeltest.Turn{Err: modeltest.ServerError()},
		modeltest.Turn{Err: modeltest.RateLimited(time.Millisecond)},
		modeltest.Turn{Err: modeltest.Overloaded()},
	)
	f.start(f.config())
	id := f.session()
	f.say(id, "hi")

	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, userMsg, running,
		start, end, sessErr, resched, running,
		start, end, sessErr, resched, running,
		start, end, sessErr, idle)
	wantTypes := []apitype.SessionErrorType{apitype.SessionErrModelRequestFailed, apitype.SessionErrModelRateLimited, apitype.SessionErrModelOverloaded}
	wantStatus := []apitype.RetryStatusType{"retrying", "retrying", "exhausted"}
	wantReasons := []apitype.FailureReason{apitype.ReasonServerError, apitype.ReasonRateLimited, apitype.ReasonOverloaded}
	for n, i := range []int{4, 9, 14} {
		e := decode[apitype.SessionError](t, evs[i]).Error
		if e.Type != wantTypes[n] || e.RetryStatus.Type != wantStatus[n] {
			t.Errorf("session.error #%d = %+v", n, e)
		}
		if want := (apitype.FailureSource{Component: apitype.ComponentModel, Backend: "anthropic", Reason: wantReasons[n]}); e.Source == nil || *e.Source != want {
			t.Errorf("session.error #%d source = %+v, want %+v", n, e.Source, want)
		}
	}
	assertStop(t, evs[15], apitype.StopRetriesExhausted)
	if n := len(f.srv.Requests()); n != 3 {
		t.Errorf("%d model requests, want 3", n)
	}
}

func TestNoCredentials(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", "")
	t.Setenv("ANTHROPIC_AUTH_TOKEN", "")
	f := newFixture(t)
	cfg := f.config()
	cfg.Model = anthropic.New(anthropic.Config{BaseURL: f.srv.URL})
	f.start(cfg)
	id := f.session()
	f.say(id, "hi")

	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, userMsg, running, start, end, sessErr, idle)
	e := decode[apitype.SessionError](t, evs[4]).Error
	if e.RetryStatus.Type != "exhausted" || !strings.Contains(e.Message, "ANTHROPIC_API_KEY") {
		t.Errorf("session.error = %+v", e)
	}
	assertStop(t, evs[5], apitype.StopRetriesExhausted)
	if n := len(f.srv.Requests()); n != 0 {
		t.Errorf("%d requests reached the model without credentials", n)
	}
	if want := (apitype.FailureSource{Component: apitype.ComponentModel, Backend: "anthropic", Reason: apitype.ReasonAuth}); e.Source == nil || *e.Source != want {
		t.Errorf("source = %+v, want %+v", e.Source, want)
	}
}

func TestInterruptMidStream(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	hold := make(chan struct{})
	defer close(hold)
	f.srv.Script(modeltest.Turn{Text: "A long answer that never finishes", Hold: hold})
	cfg := f.config()
	cfg.PreviewInterval = 5 * time.Millisecond // to know when the answer's first text reached the brain
	f.start(cfg)
	id := f.session()
	ch, unsubscribe := f.store.PreviewSubscribe(id)
	defer unsubscribe()
	f.say(id, "tell me everything")
	f.waitCalls(id, 1)
	waitTextPreview(t, ch)
	f.send(id, interrupt, apitype.UserInterrupt{})

	// What the model said before the interrupt is recorded (see TestInterruptedAnswerInNextRequest).
	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, userMsg, running, start, interrupt, agentMsg, end, idle)
	if span := decode[apitype.SpanModelRequestEnd](t, evs[5]); !span.IsError || span.ModelRequestStartID != evs[2].ID {
		t.Errorf("span end = %+v", span)
	}
	assertStop(t, evs[6], apitype.StopEndTurn)
	f.waitFor(id, "interrupt processed", func(evs []apitype.Event) bool { return evs[3].ProcessedAt != nil })
}

func TestInterruptDuringTool(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	started := make(chan struct{})
	var cancelled atomic.Bool
	f.hands.run = func(ctx context.Context, call *sandbox.Call) (sandbox.Result, error) {
		close(started)
		<-ctx.Done()
		cancelled.Store(true)
		return sandbox.Result{}, ctx.Err()
	}
	f.srv.Script(modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"sleep 1000"}`}}})
	f.start(f.config())
	id := f.session(toolset)
	f.say(id, "wait a long time")
	<-started
	f.send(id, interrupt, apitype.UserInterrupt{})

	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, userMsg, running, start, toolUse, end, usage, interrupt, toolResult, idle)
	res := decode[apitype.AgentToolResult](t, evs[7])
	if !res.IsError || res.ToolUseID != evs[3].ID || resultText(res) != "interrupted by the user" {
		t.Errorf("tool result = %+v", res)
	}
	if !cancelled.Load() {
		t.Error("the running tool was not cancelled")
	}
	assertStop(t, evs[8], apitype.StopEndTurn)
}

func TestCustomToolRoundTrip(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{ID: "toolu_w", Name: "get_weather", Input: `{"city":"Oslo"}`}}},
		modeltest.Turn{Text: "It is sunny in Oslo."},
	)
	f.start(f.config())
	id := f.session(apitype.Tool{Type: apitype.ToolTypeCustom, Name: "get_weather", Description: "Weather by city",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)})
	f.say(id, "weather in Oslo?")

	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, userMsg, running, start, customUse, end, usage, idle)
	if r := stopReason(t, evs[6]); r.Type != apitype.StopRequiresAction || !slices.Equal(r.EventIDs, []string{evs[3].ID}) {
		t.Fatalf("stop_reason = %+v, want requires_action [%s]", r, evs[3].ID)
	}
	if reqs := f.srv.Requests(); len(reqs[0].Tools) != 1 || reqs[0].Tools[0].Name != "get_weather" ||
		!strings.Contains(string(reqs[0].Tools[0].InputSchema), `"city"`) {
		t.Errorf("tools = %+v", reqs[0].Tools)
	}

	f.send(id, customReply, apitype.UserCustomToolResult{CustomToolUseID: evs[3].ID,
		Content: []apitype.ContentBlock{apitype.TextBlock("sunny, 21C")}})
	evs = f.waitIdle(id, 2)
	assertTypes(t, evs, userMsg, running, start, customUse, end, usage, idle,
		customReply, running, start, agentMsg, end, usage, idle)
	if evs[7].ProcessedAt == nil {
		t.Error("custom tool result not processed")
	}
	tr := lastToolResult(t, f.srv.Requests()[1])
	if tr.ToolUseID != "toolu_w" || blockText(tr) != "sunny, 21C" {
		t.Errorf("tool_result = %+v", tr)
	}
}

func TestAlwaysAsk(t *testing.T) {
	t.Parallel()
	asking := apitype.Tool{Type: apitype.ToolTypeAgentToolset, DefaultConfig: &apitype.ToolDefaults{
		Enabled: true, PermissionPolicy: apitype.PermissionPolicy{Type: apitype.PolicyAlwaysAsk}}}
	for _, tc := range []struct {
		name   string
		answer apitype.UserToolConfirmation
		want   []apitype.EventType
		result string
	}{
		{"allow", apitype.UserToolConfirmation{Result: "allow"},
			[]apitype.EventType{confirm, running, toolResult, start, agentMsg, end, usage, idle}, "ran bash"},
		{"deny", apitype.UserToolConfirmation{Result: "deny", DenyMessage: "not on my machine"},
			[]apitype.EventType{confirm, running, toolResult, start, agentMsg, end, usage, idle}, "The user denied this tool call. Their message: not on my machine"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.srv.Script(
				modeltest.Turn{ToolUses: []modeltest.ToolUse{{ID: "toolu_x", Name: "bash", Input: `{"command":"rm -rf build"}`}}},
				modeltest.Turn{Text: "OK."},
			)
			f.start(f.config())
			id := f.session(asking)
			f.say(id, "clean up")

			evs := f.waitIdle(id, 1)
			assertTypes(t, evs, userMsg, running, start, toolUse, end, usage, idle)
			use := decode[apitype.AgentToolUse](t, evs[3])
			if use.EvaluatedPermission != "ask" || use.Evaluation == nil || use.Evaluation.Type != apitype.PolicyAlwaysAsk {
				t.Errorf("tool use = %+v", use)
			}
			if r := stopReason(t, evs[6]); r.Type != apitype.StopRequiresAction || !slices.Equal(r.EventIDs, []string{evs[3].ID}) {
				t.Fatalf("stop_reason = %+v", r)
			}
			if f.hands.count() != 0 {
				t.Fatal("an always_ask tool ran before confirmation")
			}

			tc.answer.ToolUseID = evs[3].ID
			f.send(id, confirm, tc.answer)
			evs = f.waitIdle(id, 2)
			assertTypes(t, evs[7:], tc.want...)
			res := decode[apitype.AgentToolResult](t, evs[9])
			if res.ToolUseID != evs[3].ID || resultText(res) != tc.result || res.IsError != (tc.answer.Result == "deny") {
				t.Errorf("tool result = %+v", res)
			}
			tr := lastToolResult(t, f.srv.Requests()[1])
			if tr.ToolUseID != "toolu_x" || blockText(tr) != tc.result || tr.IsError != (tc.answer.Result == "deny") {
				t.Errorf("model saw tool_result %+v", tr)
			}
			if want := map[string]int{"allow": 1, "deny": 0}[tc.name]; f.hands.count() != want {
				t.Errorf("hands ran %d times, want %d", f.hands.count(), want)
			}
		})
	}
}

func TestUnknownAndDisabledTools(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	noBash := apitype.Tool{Type: apitype.ToolTypeAgentToolset,
		DefaultConfig: &apitype.ToolDefaults{Enabled: true, PermissionPolicy: apitype.PermissionPolicy{Type: apitype.PolicyAlwaysAllow}},
		Configs:       []apitype.ToolConfig{{Name: "bash", Enabled: false}}}
	f.srv.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{ID: "toolu_t", Name: "teleport"}, {ID: "toolu_b", Name: "bash", Input: `{"command":"id"}`}}},
		modeltest.Turn{Text: "I cannot do that."},
	)
	f.start(f.config())
	id := f.session(noBash)
	f.say(id, "teleport me")

	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, userMsg, running, start, toolUse, toolUse, end, usage, toolResult, toolResult, start, agentMsg, end, usage, idle)
	for i, want := range map[int]string{7: "there is no tool named teleport", 8: "the tool bash is disabled for this agent"} {
		res := decode[apitype.AgentToolResult](t, evs[i])
		if !res.IsError || resultText(res) != want {
			t.Errorf("result %d = %+v, want %q", i, res, want)
		}
		if use := decode[apitype.AgentToolUse](t, evs[i-4]); use.EvaluatedPermission != "deny" {
			t.Errorf("tool use %d = %+v", i-4, use)
		}
	}
	if f.hands.count() != 0 {
		t.Error("a disabled tool ran")
	}
	for _, tl := range f.srv.Requests()[0].Tools {
		if tl.Name == "bash" || tl.Name == "web_fetch" || tl.Name == "web_search" {
			t.Errorf("tool %s offered", tl.Name)
		}
	}
}

func TestNoHands(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"ls"}`}}},
		modeltest.Turn{Text: "No sandbox."},
	)
	cfg := f.config()
	cfg.Hands = nil
	f.start(cfg)
	id := f.session(toolset)
	f.say(id, "ls")
	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, userMsg, running, start, toolUse, end, usage, toolResult, start, agentMsg, end, usage, idle)
	if res := decode[apitype.AgentToolResult](t, evs[6]); !res.IsError || !strings.Contains(resultText(res), "no sandbox") {
		t.Errorf("result = %+v", res)
	}
}

// TestUnavailableHands: hands that cannot run (sandbox.Unavailable) are still offered to the model, and every
// call's result gives their reason.
func TestUnavailableHands(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const reason = "bubblewrap is not installed: apt-get install bubblewrap"
	f.srv.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"ls"}`}}},
		modeltest.Turn{Text: "The sandbox cannot run."},
	)
	cfg := f.config()
	cfg.Hands = sandbox.Unavailable(host.Tools(), reason)
	f.start(cfg)
	id := f.session(toolset)
	f.say(id, "ls")
	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, userMsg, running, start, toolUse, end, usage, toolResult, start, agentMsg, end, usage, idle)
	if use := decode[apitype.AgentToolUse](t, evs[3]); use.EvaluatedPermission != "allow" {
		t.Errorf("tool use = %+v", use)
	}
	res := decode[apitype.AgentToolResult](t, evs[6])
	if !res.IsError || resultText(res) != reason {
		t.Errorf("result = %+v, want the reason %q", res, reason)
	}
	if want := (apitype.FailureSource{Component: apitype.ComponentHands, Backend: "unavailable", Reason: apitype.ReasonUnavailable}); res.Source == nil || *res.Source != want {
		t.Errorf("result source = %+v, want %+v", res.Source, want)
	}
	if n := len(f.srv.Requests()[0].Tools); n != len(host.Tools()) {
		t.Errorf("offered %d tools, want the %d the hands declare", n, len(host.Tools()))
	}
}

// jsonEqual reports whether two JSON documents are equal as values.
func jsonEqual(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(va, vb)
}

func TestSandboxFailureAndProvisionSpans(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.hands.run = func(ctx context.Context, call *sandbox.Call) (sandbox.Result, error) {
		// The image is still building (the base, on a first start): the start says so.
		call.OnProvision(sandbox.ProvisionReport{Backend: "fake", Image: &apitype.EnvironmentImage{ID: "base-x", Status: apitype.ImageBuilding}})
		call.OnProvision(sandbox.ProvisionReport{Backend: "fake", Done: true, Duration: 5 * time.Millisecond})
		if call.Recipe.SessionID == "" || call.Recipe.Environment.Type != "cloud" {
			return sandbox.Result{}, errors.New("bad recipe")
		}
		return sandbox.Result{}, fmt.Errorf("exec: %w", sandbox.ErrSandboxDead)
	}
	f.srv.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"ls"}`}}},
		modeltest.Turn{Text: "The sandbox died."},
	)
	f.start(f.config())
	id := f.session(toolset)
	f.say(id, "ls")
	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, userMsg, running, start, toolUse, end, usage,
		apitype.EventSpanSandboxProvisionStart, apitype.EventSpanSandboxProvisionEnd, toolResult, start, agentMsg, end, usage, idle)
	if ps := decode[apitype.SandboxProvisionStart](t, evs[6]); ps.Backend != "fake" || ps.Image == nil || ps.Image.ID != "base-x" || ps.Image.Status != apitype.ImageBuilding {
		t.Errorf("provision start = %+v (image %+v): want the image it waits for", ps, ps.Image)
	}
	if pe := decode[apitype.SandboxProvisionEnd](t, evs[7]); pe.ProvisionStartID != evs[6].ID || pe.Backend != "fake" || pe.IsError {
		t.Errorf("provision end = %+v", pe)
	}
	res := decode[apitype.AgentToolResult](t, evs[8])
	if !res.IsError || !strings.Contains(resultText(res), "sandbox died") {
		t.Errorf("result = %+v", res)
	}
}

// A repository that could not be cloned is a session.error (retrying: the session continues without it),
// logged with the provisioning span that tried it.
func TestResourceErrorsLogged(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.hands.run = func(ctx context.Context, call *sandbox.Call) (sandbox.Result, error) {
		call.OnProvision(sandbox.ProvisionReport{Backend: "fake"})
		call.OnProvision(sandbox.ProvisionReport{Backend: "fake", Done: true, ResourceErrors: []*sandbox.ResourceError{{
			Type: "github_repository", URL: "https://example.invalid/r.git", MountPath: "/workspace/r",
			ErrorType: "repository_clone_error", Err: errors.New("could not resolve host"),
		}}})
		return sandbox.Result{Content: []apitype.ContentBlock{apitype.TextBlock("ok")}}, nil
	}
	f.srv.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"ls"}`}}},
		modeltest.Turn{Text: "done"},
	)
	f.start(f.config())
	id := f.session(toolset)
	f.say(id, "ls")
	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, userMsg, running, start, toolUse, end, usage,
		apitype.EventSpanSandboxProvisionStart, apitype.EventSpanSandboxProvisionEnd, apitype.EventSessionError,
		toolResult, start, agentMsg, end, usage, idle)
	se := decode[apitype.SessionError](t, evs[8])
	if se.Error.Type != "repository_clone_error" || se.Error.RetryStatus.Type != "retrying" ||
		se.Error.RepositoryURL == nil || *se.Error.RepositoryURL != "https://example.invalid/r.git" ||
		!strings.Contains(se.Error.Message, "could not resolve host") {
		t.Errorf("session.error = %+v", se.Error)
	}
}

func TestCompaction(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	long := strings.Repeat("lorem ipsum ", 50) // 600 characters
	f.srv.Script(
		modeltest.Turn{Text: strings.Repeat("answer ", 50)},
		modeltest.Turn{Text: "SUMMARY-XYZ"},
		modeltest.Turn{Text: "ok"},
		modeltest.Turn{Text: "still ok"},
	)
	cfg := f.config()
	cfg.ContextTokens, cfg.CompactAt = 400, 0.5 // compact past 200 estimated tokens
	b := newBrain(t, cfg)
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	id := f.session()
	f.say(id, long)
	f.waitIdle(id, 1)
	f.say(id, "and now?")
	evs := f.waitIdle(id, 2)
	assertTypes(t, evs, userMsg, running, start, agentMsg, end, usage, idle,
		userMsg, running, start, end, usage, compacted, start, agentMsg, end, usage, idle)
	c := decode[apitype.ContextCompacted](t, evs[12])
	if c.Summary != "SUMMARY-XYZ" || c.UpToSeq != evs[3].Seq {
		t.Errorf("compaction = %+v (the first answer is seq %d)", c, evs[3].Seq)
	}
	reqs := f.srv.Requests()
	if len(reqs[1].Messages) != 3 || reqs[1].Messages[0].Content[0].Text != long || !strings.Contains(reqs[1].LastUserText(), "Summarise") {
		t.Errorf("summary request = %+v", reqs[1].Messages)
	}
	main := reqs[2]
	if len(main.Messages) != 1 || !strings.Contains(main.Messages[0].Content[0].Text, "SUMMARY-XYZ") ||
		main.LastUserText() == "" || !strings.HasSuffix(main.LastUserText(), "and now?") || strings.Contains(main.LastUserText(), "lorem") {
		t.Errorf("request after compaction = %+v", main.Messages)
	}
	if evs[0].Type != userMsg || !strings.Contains(string(evs[0].Data), "lorem") {
		t.Error("the log was rewritten")
	}

	// A fresh brain rebuilds the context from the summary, not from the log's start.
	b.Stop()
	f.start(f.config())
	f.say(id, "third")
	evs = f.waitIdle(id, 3)
	assertTypes(t, evs[18:], userMsg, running, start, agentMsg, end, usage, idle)
	next := f.srv.Requests()[3]
	if !strings.Contains(next.Messages[0].Content[0].Text, "SUMMARY-XYZ") || next.LastUserText() != "third" {
		t.Errorf("request from a fresh brain = %+v", next.Messages)
	}
	for _, m := range next.Messages {
		for _, bl := range m.Content {
			if strings.Contains(bl.Text, "lorem") {
				t.Error("compacted content sent again")
			}
		}
	}
}

// crashable wraps a store; after kill every call fails, as if the brain's process had died.
type crashable struct {
	store.Store
	dead atomic.Bool
}

var errKilled = errors.New("process killed")

func (c *crashable) check() error {
	if c.dead.Load() {
		return errKilled
	}
	return nil
}

func (c *crashable) EventAppend(ctx context.Context, p *store.EventAppendParams) ([]apitype.Event, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	return c.Store.EventAppend(ctx, p)
}

func (c *crashable) EventList(ctx context.Context, p *store.EventListParams) ([]apitype.Event, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	return c.Store.EventList(ctx, p)
}

func (c *crashable) EventMarkProcessed(ctx context.Context, p *store.EventMarkProcessedParams) error {
	if err := c.check(); err != nil {
		return err
	}
	return c.Store.EventMarkProcessed(ctx, p)
}

func (c *crashable) LeaseClaim(ctx context.Context, p *store.LeaseClaimParams) ([]*store.Lease, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	return c.Store.LeaseClaim(ctx, p)
}

func (c *crashable) LeaseRenew(ctx context.Context, l *store.Lease, ttl time.Duration) (*store.Lease, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	return c.Store.LeaseRenew(ctx, l, ttl)
}

func (c *crashable) LeaseRelease(ctx context.Context, l *store.Lease) error {
	if err := c.check(); err != nil {
		return err
	}
	return c.Store.LeaseRelease(ctx, l)
}

// assertRecovered checks the session.error a brain appends when it resumes a turn another left mid-way: the
// brain's, crash_recovered, retrying.
func assertRecovered(t *testing.T, ev apitype.Event) {
	t.Helper()
	e := decode[apitype.SessionError](t, ev).Error
	want := apitype.FailureSource{Component: apitype.ComponentBrain, Reason: apitype.ReasonCrashRecovered}
	if e.Source == nil || *e.Source != want || e.RetryStatus.Type != apitype.RetryStatusRetrying {
		t.Errorf("takeover session.error = %+v (source %+v), want source %+v, retrying", e, e.Source, want)
	}
}

func TestTakeoverMidModelCall(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	hold := make(chan struct{})
	defer close(hold)
	f.srv.Script(
		modeltest.Turn{Text: "brain A's answer", Hold: hold},
		modeltest.Turn{Text: "brain B's answer"},
	)
	cs := &crashable{Store: f.store}
	cfgA := f.config()
	cfgA.Store, cfgA.LeaseTTL, cfgA.Owner, cfgA.Workers = cs, 300*time.Millisecond, "brain-a", 1
	f.start(cfgA)
	id := f.session()
	f.say(id, "hi")
	f.waitCalls(id, 1)
	cs.dead.Store(true) // brain A dies mid-call: no release, no further appends

	cfgB := f.config()
	cfgB.Owner, cfgB.LeaseTTL = "brain-b", 5*time.Second // long: a lapsed lease of its own would be a second takeover
	f.start(cfgB)
	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, userMsg, running, start, apitype.EventSessionError, end, start, agentMsg, end, usage, idle)
	assertRecovered(t, evs[3])
	if span := decode[apitype.SpanModelRequestEnd](t, evs[4]); !span.IsError || span.ModelRequestStartID != evs[2].ID {
		t.Errorf("dangling span closed with %+v", span)
	}
	if msg := decode[apitype.AgentMessage](t, evs[6]); msg.Content[0].Text != "brain B's answer" {
		t.Errorf("agent.message = %+v", msg)
	}
	if n := len(f.srv.Requests()); n != 2 {
		t.Errorf("%d model requests, want 2", n)
	}
}

func TestTakeoverToolUseWithoutResult(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cs := &crashable{Store: f.store}
	handsA := &fakeHands{run: func(ctx context.Context, call *sandbox.Call) (sandbox.Result, error) {
		cs.dead.Store(true) // brain A dies while the tool runs
		<-ctx.Done()
		return sandbox.Result{}, ctx.Err()
	}}
	f.srv.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{ID: "toolu_m", Name: "bash", Input: `{"command":"make deploy"}`}}},
		modeltest.Turn{Text: "I will check whether the deploy happened."},
	)
	cfgA := f.config()
	cfgA.Store, cfgA.Hands, cfgA.LeaseTTL, cfgA.Owner, cfgA.Workers = cs, handsA, 300*time.Millisecond, "brain-a", 1
	f.start(cfgA)
	id := f.session(toolset)
	f.say(id, "deploy")
	f.waitFor(id, "brain A's tool use", func(evs []apitype.Event) bool { return slices.Contains(types(evs), toolUse) })
	for !cs.dead.Load() {
		time.Sleep(5 * time.Millisecond)
	}

	cfgB := f.config()
	cfgB.Owner, cfgB.LeaseTTL = "brain-b", 5*time.Second // long: a lapsed lease of its own would be a second takeover
	f.start(cfgB)
	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, userMsg, running, start, toolUse, end, usage, apitype.EventSessionError, toolResult, start, agentMsg, end, usage, idle)
	assertRecovered(t, evs[6])
	res := decode[apitype.AgentToolResult](t, evs[7])
	if !res.IsError || res.ToolUseID != evs[3].ID || !strings.Contains(resultText(res), "outcome is unknown") {
		t.Errorf("result at takeover = %+v", res)
	}
	if want := (apitype.FailureSource{Component: apitype.ComponentBrain, Reason: apitype.ReasonCrashRecovered}); res.Source == nil || *res.Source != want {
		t.Errorf("the unknown outcome's source = %+v, want %+v", res.Source, want)
	}
	if f.hands.count() != 0 {
		t.Error("brain B ran the interrupted tool again")
	}
	if tr := lastToolResult(t, f.srv.Requests()[1]); tr.ToolUseID != "toolu_m" || !tr.IsError || !strings.Contains(blockText(tr), "outcome is unknown") {
		t.Errorf("model saw %+v", tr)
	}
}

func TestStopReschedulesMidTurn(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	hold := make(chan struct{})
	defer close(hold)
	f.srv.Script(
		modeltest.Turn{Text: "never delivered", Hold: hold},
		modeltest.Turn{Text: "delivered"},
	)
	a := newBrain(t, f.config())
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	id := f.session()
	f.say(id, "hi")
	f.waitCalls(id, 1)
	a.Stop()
	a.Stop() // idempotent
	assertTypes(t, f.events(id), userMsg, running, start, resched)

	f.start(f.config())
	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, userMsg, running, start, resched, end, running, start, agentMsg, end, usage, idle)
}

func TestTwoBrainsNeverShareASession(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const n = 6
	hasResult := func(r *modeltest.Request) bool {
		last := r.Messages[len(r.Messages)-1]
		return slices.ContainsFunc(last.Content, func(b modeltest.Block) bool { return b.Type == "tool_result" })
	}
	var turns []modeltest.Turn
	for range n {
		turns = append(turns,
			modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"true"}`}},
				Match: func(r *modeltest.Request) bool { return !hasResult(r) }},
			modeltest.Turn{Text: "reply", Match: hasResult})
	}
	f.srv.Script(turns...)
	var mu sync.Mutex
	busy := map[string]bool{}
	overlap := false
	f.hands.run = func(ctx context.Context, call *sandbox.Call) (sandbox.Result, error) {
		mu.Lock()
		overlap = overlap || busy[call.Recipe.SessionID]
		busy[call.Recipe.SessionID] = true
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		delete(busy, call.Recipe.SessionID)
		mu.Unlock()
		return sandbox.Result{Content: []apitype.ContentBlock{apitype.TextBlock("ok")}}, nil
	}
	a, b := f.config(), f.config()
	a.Owner, b.Owner = "brain-a", "brain-b"
	f.start(a)
	f.start(b)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = f.session(toolset)
		f.say(ids[i], "hello")
	}
	for _, id := range ids {
		assertTypes(t, f.waitIdle(id, 1), userMsg, running, start, toolUse, end, usage, toolResult, start, agentMsg, end, usage, idle)
	}
	if f.hands.count() != n {
		t.Errorf("hands ran %d times, want %d", f.hands.count(), n)
	}
	mu.Lock()
	defer mu.Unlock()
	if overlap {
		t.Error("two brains worked one session at once")
	}
}

func TestPromptTooLongCompactsAndRetries(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.Script(
		modeltest.Turn{Text: "first answer"},
		modeltest.Turn{Err: modeltest.PromptTooLong()},
		modeltest.Turn{Text: "SUMMARY-1"},
		modeltest.Turn{Text: "second answer"},
	)
	f.start(f.config())
	id := f.session()
	f.say(id, "one")
	f.waitIdle(id, 1)
	f.say(id, "two")
	evs := f.waitIdle(id, 2)
	assertTypes(t, evs[7:], userMsg, running, start, end, start, end, usage, compacted, start, agentMsg, end, usage, idle)
	if span := decode[apitype.SpanModelRequestEnd](t, evs[10]); !span.IsError {
		t.Errorf("too-long span = %+v", span)
	}
	last := f.srv.Requests()[3]
	if len(last.Messages) != 1 || !strings.Contains(last.Messages[0].Content[0].Text, "SUMMARY-1") || !strings.HasSuffix(last.LastUserText(), "two") {
		t.Errorf("request after forced compaction = %+v", last.Messages)
	}
}

func TestInterruptWhileRequiresAction(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{ID: "toolu_c", Name: "lookup"}}},
		modeltest.Turn{Text: "Never mind then."},
	)
	f.start(f.config())
	id := f.session(apitype.Tool{Type: apitype.ToolTypeCustom, Name: "lookup", Description: "Look up", InputSchema: json.RawMessage(`{"type":"object"}`)})
	f.say(id, "look it up")
	f.waitIdle(id, 1)
	f.send(id, interrupt, apitype.UserInterrupt{})
	evs := f.waitIdle(id, 2)
	assertTypes(t, evs, userMsg, running, start, customUse, end, usage, idle, interrupt, toolResult, idle)
	if res := decode[apitype.AgentToolResult](t, evs[8]); res.ToolUseID != evs[3].ID || !res.IsError || resultText(res) != "interrupted by the user" {
		t.Errorf("result = %+v", res)
	}
	assertStop(t, evs[9], apitype.StopEndTurn)

	// The next message starts a turn whose history is valid: the interrupted call has its result.
	f.say(id, "something else")
	evs = f.waitIdle(id, 3)
	assertTypes(t, evs[10:], userMsg, running, start, agentMsg, end, usage, idle)
	req := f.srv.Requests()[1]
	last := req.Messages[len(req.Messages)-1]
	if len(last.Content) != 2 || last.Content[0].ToolUseID != "toolu_c" || last.Content[1].Text != "something else" {
		t.Errorf("last turn = %+v", last)
	}
}

func TestThinkingKeptForTheModel(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.Script(
		modeltest.Turn{Thinking: "I should list files.", Signature: "sig-1", ToolUses: []modeltest.ToolUse{{ID: "toolu_1", Name: "glob", Input: `{"pattern":"*"}`}}},
		modeltest.Turn{Text: "Two files."},
	)
	cfg := f.config()
	cfg.MaxTokens, cfg.ThinkingBudget = 4096, 1024
	f.start(cfg)
	id := f.session(toolset)
	f.say(id, "what is here?")
	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, userMsg, running, start, apitype.EventAgentThinking, toolUse, end, usage, toolResult, start, agentMsg, end, usage, idle)
	if th := decode[apitype.AgentThinking](t, evs[3]); th.Thinking != "I should list files." || th.Signature != "sig-1" {
		t.Errorf("agent.thinking = %+v", th)
	}
	req := f.srv.Requests()[1]
	if req.Thinking == nil || req.Thinking.BudgetTokens != 1024 {
		t.Errorf("thinking param = %+v", req.Thinking)
	}
	asst := req.Messages[1]
	if asst.Role != "assistant" || len(asst.Content) != 2 || asst.Content[0].Type != "thinking" ||
		asst.Content[0].Signature != "sig-1" || asst.Content[1].ID != "toolu_1" {
		t.Errorf("assistant turn replayed as %+v", asst)
	}
}

// stallingStore holds a brain's first read of a session until the brain stops: the brain has claimed the session
// but not looked at its log yet.
type stallingStore struct {
	store.Store
	entered chan struct{}
	once    sync.Once
}

func (s *stallingStore) SessionGet(ctx context.Context, id string) (*apitype.Session, error) {
	s.once.Do(func() { close(s.entered) })
	<-ctx.Done()
	return nil, ctx.Err()
}

// A brain that stops after claiming a session, before acting on the message that woke it, must leave the session
// runnable: the message was acknowledged to the client, so the next brain has to answer it.
func TestStopBeforeActingKeepsSessionRunnable(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.Script(modeltest.Turn{Text: "answered"})
	ss := &stallingStore{Store: f.store, entered: make(chan struct{})}
	cfgA := f.config()
	cfgA.Store, cfgA.Owner, cfgA.Workers = ss, "brain-a", 1
	a := newBrain(t, cfgA)
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	id := f.session()
	f.say(id, "hi")
	<-ss.entered
	a.Stop()

	cfgB := f.config()
	cfgB.Owner = "brain-b"
	f.start(cfgB)
	assertTypes(t, f.waitIdle(id, 1), userMsg, running, start, agentMsg, end, usage, idle)
}

// claimHoldingStore's claims succeed in the store but return only once the brain is stopping, as if the
// claim's answer arrived just as Stop was called.
type claimHoldingStore struct {
	store.Store
	claimed chan struct{}
	once    sync.Once
}

func (s *claimHoldingStore) LeaseClaim(ctx context.Context, p *store.LeaseClaimParams) ([]*store.Lease, error) {
	ls, err := s.Store.LeaseClaim(context.WithoutCancel(ctx), p)
	if err == nil {
		s.once.Do(func() { close(s.claimed) })
		<-ctx.Done()
	}
	return ls, err
}

// A brain that stops holding leases it claimed but never worked hands them back: the next brain claims the
// sessions at once, not after the lease TTL.
func TestStopHandsBackUnworkedClaims(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cs := &claimHoldingStore{Store: f.store, claimed: make(chan struct{})}
	cfg := f.config()
	cfg.Store, cfg.Owner, cfg.LeaseTTL = cs, "brain-a", time.Minute
	a := newBrain(t, cfg)
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	id := f.session()
	f.say(id, "hi")
	<-cs.claimed
	a.Stop()

	ls, err := f.store.LeaseClaim(context.Background(), &store.LeaseClaimParams{Owner: "brain-b", TTL: time.Minute, SessionID: id})
	if err != nil {
		t.Fatalf("claim after the first brain stopped: %v (its one-minute lease was kept)", err)
	}
	if ls[0].SessionID != id {
		t.Fatalf("claimed %s, want %s", ls[0].SessionID, id)
	}
}

// TestNoEnvironmentNoNetwork: a session whose environment is gone (or that never had one: a dream's) runs its
// tools in a cloud sandbox with limited networking and no allowed host, never with the unrestricted network a
// zero configuration would mean.
func TestNoEnvironmentNoNetwork(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	hands := &fakeHands{}
	var got atomic.Pointer[apitype.EnvConfig]
	hands.run = func(ctx context.Context, call *sandbox.Call) (sandbox.Result, error) {
		env := call.Recipe.Environment
		got.Store(&env)
		return sandbox.Result{Content: []apitype.ContentBlock{apitype.TextBlock("ok")}}, nil
	}
	cfg := f.config()
	cfg.Hands = hands
	f.srv.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{ID: "toolu_1", Name: "bash", Input: `{"command":"curl example.com"}`}}},
		modeltest.Turn{Text: "Done."},
	)
	f.start(cfg)
	id := f.session(toolset)
	sess, err := f.store.SessionGet(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.EnvironmentDelete(context.Background(), sess.EnvironmentID); err != nil {
		t.Fatal(err)
	}
	f.say(id, "fetch it")
	f.waitIdle(id, 1)
	env := got.Load()
	if env == nil {
		t.Fatal("the tool never ran")
	}
	if env.Type != apitype.EnvironmentCloud || env.Networking == nil || env.Networking.Type != apitype.NetworkingLimited ||
		len(env.Networking.AllowedHosts) != 0 {
		t.Fatalf("the recipe's environment is %+v (networking %+v): want cloud, limited, no allowed hosts", env, env.Networking)
	}
}
