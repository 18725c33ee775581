package harness_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/harness"
	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/store"
)

const (
	defineOutcome = apitype.EventUserDefineOutcome
	evalStart     = apitype.EventSpanOutcomeEvaluationStart
	evalOngoing   = apitype.EventSpanOutcomeEvaluationOngoing
	evalEnd       = apitype.EventSpanOutcomeEvaluationEnd
)

func outcomeDef(maxIter int) apitype.DefineOutcome {
	return apitype.DefineOutcome{OutcomeID: apitype.NewID("outc_"), Description: "Write a haiku about goats.",
		Rubric: json.RawMessage(`{"type":"text","content":"1. Three lines. 2. Mentions goats."}`), MaxIterations: maxIter}
}

// verdictTurn is the grader's scripted answer: a record_evaluation call.
func verdictTurn(result, explanation string) modeltest.Turn {
	in, _ := json.Marshal(map[string]any{"result": result, "explanation": explanation,
		"criteria": []map[string]any{{"criterion": "Three lines", "met": result == "satisfied", "explanation": explanation}}})
	return modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "record_evaluation", Input: string(in)}},
		Usage: modeltest.Usage{InputTokens: 100, OutputTokens: 20}}
}

func ofType(evs []apitype.Event, typ apitype.EventType) []apitype.Event {
	var out []apitype.Event
	for _, e := range evs {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// TestOutcomeSatisfied: the definition starts a turn with its description as the task; when the turn ends the
// session stays running while a grader, in a request of its own (its system prompt, the rubric, the agent's
// work, the record_evaluation tool), grades it; its verdict ends the outcome and the turn, and its usage counts
// in the session's.
func TestOutcomeSatisfied(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.start(f.config())
	id := f.session()
	f.srv.Script(modeltest.Turn{Text: "Goats on the hillside", Usage: modeltest.Usage{InputTokens: 10, OutputTokens: 5}},
		verdictTurn("satisfied", "Three lines about goats."))
	def := outcomeDef(3)
	f.send(id, defineOutcome, def)
	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, defineOutcome, running, start, agentMsg, end, usage, evalStart, evalOngoing, evalEnd, usage, idle)
	assertStop(t, evs[10], apitype.StopEndTurn)
	if s := decode[apitype.OutcomeEvaluationSpan](t, evs[6]); s.OutcomeID != def.OutcomeID || s.Iteration != 0 {
		t.Errorf("evaluation start %s", evs[6].Data)
	}
	e := decode[apitype.OutcomeEvaluationEnd](t, evs[8])
	if e.Result != apitype.OutcomeSatisfied || e.Explanation != "Three lines about goats." || e.OutcomeEvaluationStartID != evs[6].ID ||
		e.Usage.InputTokens != 100 || e.Usage.OutputTokens != 20 || len(e.Criteria) != 1 || !e.Criteria[0].Met {
		t.Errorf("evaluation end %s", evs[8].Data)
	}
	// Each model request, the agent's and the grader's, is followed by the session's usage so far.
	for i, want := range map[int]int64{5: 10, 9: 110} {
		if u := decode[apitype.SessionUsageEvent](t, evs[i]); u.Usage.InputTokens != want || string(u.Budget) != "null" {
			t.Errorf("session.usage %d: %s, want %d input tokens and a null budget", i, evs[i].Data, want)
		}
	}
	reqs := f.srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	if !strings.Contains(string(reqs[0].Body), "Write a haiku about goats.") {
		t.Errorf("the agent's request lacks the task: %s", reqs[0].Body)
	}
	g := reqs[1]
	if !strings.Contains(string(g.Body), "You are the grader") || !strings.Contains(string(g.Body), "Mentions goats") ||
		!strings.Contains(string(g.Body), "Goats on the hillside") || len(g.Tools) != 1 || g.Tools[0].Name != "record_evaluation" {
		t.Errorf("grader request: %s", g.Body)
	}
	if strings.Contains(string(g.Body), "You are a test agent") {
		t.Error("the grader's context holds the agent's system prompt")
	}
	sess, err := f.store.SessionGet(context.Background(), id)
	if err != nil || sess.Usage.InputTokens != 110 || sess.Usage.OutputTokens != 25 ||
		sess.Usage.ListCostPicodollars != 110*3_000_000+25*15_000_000 {
		t.Fatalf("session usage: %v %+v", err, sess.Usage)
	}
}

// TestOutcomeRevisedTwice: two needs_revision verdicts each go back to the agent, whose revision turns start
// without a client event; the third evaluation is satisfied.
func TestOutcomeRevisedTwice(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.start(f.config())
	id := f.session()
	f.srv.Script(modeltest.Turn{Text: "v1"}, verdictTurn("needs_revision", "Too short: FIX-ONE."),
		modeltest.Turn{Text: "v2"}, verdictTurn("needs_revision", "No goats: FIX-TWO."),
		modeltest.Turn{Text: "v3"}, verdictTurn("satisfied", "Good."))
	f.send(id, defineOutcome, outcomeDef(3))
	evs := f.waitIdle(id, 1)
	ends := ofType(evs, evalEnd)
	want := []apitype.OutcomeResult{apitype.OutcomeNeedsRevision, apitype.OutcomeNeedsRevision, apitype.OutcomeSatisfied}
	if len(ends) != 3 {
		t.Fatalf("%d evaluation ends; log %v", len(ends), types(evs))
	}
	for i, e := range ends {
		if d := decode[apitype.OutcomeEvaluationEnd](t, e); d.Result != want[i] || d.Iteration != i {
			t.Errorf("evaluation %d: %s", i, e.Data)
		}
	}
	if n := len(ofType(evs, idle)); n != 1 {
		t.Errorf("%d idles, want 1: the session stays running through the revisions", n)
	}
	reqs := f.srv.Requests()
	if len(reqs) != 6 {
		t.Fatalf("%d requests", len(reqs))
	}
	if !strings.Contains(string(reqs[2].Body), "FIX-ONE") || !strings.Contains(string(reqs[4].Body), "FIX-TWO") {
		t.Error("a revision turn lacks the grader's explanation")
	}
	// The grader sees only the current iteration's work.
	if !strings.Contains(string(reqs[5].Body), "v3") || strings.Contains(string(reqs[5].Body), "v2\\n") {
		t.Errorf("third grader request: %s", reqs[5].Body)
	}
}

// TestOutcomeMaxIterations: with max_iterations 2, the second needs_revision ends the outcome
// max_iterations_reached, and the turn.
func TestOutcomeMaxIterations(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.start(f.config())
	id := f.session()
	f.srv.Script(modeltest.Turn{Text: "v1"}, verdictTurn("needs_revision", "no"),
		modeltest.Turn{Text: "v2"}, verdictTurn("needs_revision", "still no"))
	f.send(id, defineOutcome, outcomeDef(2))
	evs := f.waitIdle(id, 1)
	ends := ofType(evs, evalEnd)
	if len(ends) != 2 {
		t.Fatalf("log %v", types(evs))
	}
	if d := decode[apitype.OutcomeEvaluationEnd](t, ends[1]); d.Result != apitype.OutcomeMaxIterationsReached || d.Explanation != "still no" || d.Iteration != 1 {
		t.Errorf("last evaluation %s", ends[1].Data)
	}
	if n := len(f.srv.Requests()); n != 4 {
		t.Errorf("%d requests, want 4", n)
	}
}

// TestOutcomeGraderFails: a grader whose model request fails for good ends the outcome failed, with the reason,
// and the turn; so does a grader that answers without calling record_evaluation.
func TestOutcomeGraderFails(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.start(f.config())
	id := f.session()
	f.srv.Script(modeltest.Turn{Text: "done"}, modeltest.Turn{Err: modeltest.Invalid("grader request rejected")})
	f.send(id, defineOutcome, outcomeDef(3))
	evs := f.waitIdle(id, 1)
	assertTypes(t, evs[len(evs)-4:], evalStart, evalOngoing, evalEnd, idle)
	if d := decode[apitype.OutcomeEvaluationEnd](t, evs[len(evs)-2]); d.Result != apitype.OutcomeFailed ||
		!strings.Contains(d.Explanation, "grader request rejected") {
		t.Errorf("evaluation end %s", evs[len(evs)-2].Data)
	}

	f.srv.Script(modeltest.Turn{Text: "done again"}, modeltest.Turn{Text: "Looks fine to me."})
	f.send(id, defineOutcome, outcomeDef(3))
	evs = f.waitIdle(id, 2)
	// The grader's request succeeded: its usage is reported after the evaluation's end.
	assertTypes(t, evs[len(evs)-5:], evalStart, evalOngoing, evalEnd, usage, idle)
	if d := decode[apitype.OutcomeEvaluationEnd](t, evs[len(evs)-3]); d.Result != apitype.OutcomeFailed ||
		!strings.Contains(d.Explanation, "without calling record_evaluation") {
		t.Errorf("evaluation end %s", evs[len(evs)-3].Data)
	}
}

// TestOutcomeInterruptedWhileGrading: an interrupt while the grader's request is in flight ends the outcome
// interrupted, and the turn; no revision follows.
func TestOutcomeInterruptedWhileGrading(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	hold := make(chan struct{})
	defer close(hold)
	cfg := f.config()
	cfg.GraderHeartbeat = 20 * time.Millisecond
	f.start(cfg)
	id := f.session()
	g := verdictTurn("needs_revision", "never seen")
	g.Hold = hold
	f.srv.Script(modeltest.Turn{Text: "done"}, g)
	f.send(id, defineOutcome, outcomeDef(3))
	f.waitRequests(2)
	// While the grader's request is in flight, heartbeats.
	f.waitFor(id, "3 heartbeats", func(evs []apitype.Event) bool { return len(ofType(evs, evalOngoing)) >= 3 })
	f.send(id, interrupt, apitype.UserInterrupt{})
	evs := f.waitIdle(id, 1)
	// The heartbeats aside (one may land after the interrupt), the evaluation ends interrupted.
	evs = slices.DeleteFunc(evs, func(e apitype.Event) bool { return e.Type == evalOngoing })
	assertTypes(t, evs[len(evs)-4:], evalStart, interrupt, evalEnd, idle)
	d := decode[apitype.OutcomeEvaluationEnd](t, evs[len(evs)-2])
	if d.Result != apitype.OutcomeInterrupted || d.OutcomeEvaluationStartID != evs[len(evs)-4].ID {
		t.Errorf("evaluation end %s", evs[len(evs)-2].Data)
	}
	f.waitFor(id, "interrupt processed", func(evs []apitype.Event) bool { return ofType(evs, interrupt)[0].ProcessedAt != nil })
	if n := len(f.srv.Requests()); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
}

// TestOutcomeGradingResumedAfterCrash: a log that a brain left in the middle of grading (the evaluation started,
// a heartbeat, no end) is graded by the next brain, once: one grader request, one evaluation end.
func TestOutcomeGradingResumedAfterCrash(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.session()
	def := outcomeDef(3)
	ctx := context.Background()
	mk := func(typ apitype.EventType, v any) apitype.NewEvent {
		ev, err := apitype.MakeEvent(typ, v)
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	dev := mk(defineOutcome, def)
	dev.Processed = true
	span := apitype.OutcomeEvaluationSpan{OutcomeID: def.OutcomeID}
	if _, err := f.store.EventAppend(ctx, &store.EventAppendParams{SessionID: id, Wake: true, Status: apitype.StatusRunning,
		Events: []apitype.NewEvent{dev, mk(running, nil),
			mk(agentMsg, apitype.AgentMessage{Content: []apitype.ContentBlock{apitype.TextBlock("the work")}}),
			mk(evalStart, span), mk(evalOngoing, span)}}); err != nil {
		t.Fatal(err)
	}
	f.srv.Script(verdictTurn("satisfied", "ok"))
	f.start(f.config())
	evs := f.waitIdle(id, 1)
	if n := len(ofType(evs, evalEnd)); n != 1 {
		t.Fatalf("%d evaluation ends; log %v", n, types(evs))
	}
	reqs := f.srv.Requests()
	if len(reqs) != 1 || !strings.Contains(string(reqs[0].Body), harness.GraderSystemPrompt[:30]) ||
		!strings.Contains(string(reqs[0].Body), "the work") {
		t.Fatalf("%d requests; want the one grader request", len(reqs))
	}
	e := ofType(evs, evalEnd)[0]
	if d := decode[apitype.OutcomeEvaluationEnd](t, e); d.Result != apitype.OutcomeSatisfied || d.OutcomeEvaluationStartID != ofType(evs, evalStart)[0].ID {
		t.Errorf("evaluation end %s", e.Data)
	}
}

// TestGraderModel: Config.GraderModel grades with another model than the agent's.
func TestGraderModel(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cfg := f.config()
	cfg.GraderModel = "claude-haiku-4-5"
	f.start(cfg)
	id := f.session()
	f.srv.Script(modeltest.Turn{Text: "done"}, verdictTurn("satisfied", "ok"))
	f.send(id, defineOutcome, outcomeDef(1))
	f.waitIdle(id, 1)
	reqs := f.srv.Requests()
	if len(reqs) != 2 || reqs[0].Model != "claude-sonnet-4-5" || reqs[1].Model != "claude-haiku-4-5" {
		t.Fatalf("models: %+v", reqs)
	}
}

// TestOutcomeInterruptedWhileWorking: an interrupt while the agent works on an outcome ends the outcome
// interrupted too (no evaluation started: the end names none), and a later definition is taken up afresh.
func TestOutcomeInterruptedWhileWorking(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	hold := make(chan struct{})
	defer close(hold)
	f.start(f.config())
	id := f.session()
	f.srv.Script(modeltest.Turn{Text: "working on it", Hold: hold})
	def := outcomeDef(3)
	f.send(id, defineOutcome, def)
	f.waitCalls(id, 1)
	f.send(id, interrupt, apitype.UserInterrupt{})
	evs := f.waitIdle(id, 1)
	evs = slices.DeleteFunc(evs, func(e apitype.Event) bool { return e.Type == agentMsg }) // what it had streamed, if any
	assertTypes(t, evs, defineOutcome, running, start, interrupt, end, evalEnd, idle)
	if d := decode[apitype.OutcomeEvaluationEnd](t, evs[5]); d.Result != apitype.OutcomeInterrupted || d.OutcomeID != def.OutcomeID ||
		d.OutcomeEvaluationStartID != "" || d.Iteration != 0 {
		t.Errorf("evaluation end %s", evs[5].Data)
	}
	// The next definition is active, evaluated and satisfied.
	f.srv.Script(modeltest.Turn{Text: "done"}, verdictTurn("satisfied", "ok"))
	f.send(id, defineOutcome, outcomeDef(3))
	evs = f.waitIdle(id, 2)
	assertTypes(t, evs[len(evs)-7:], end, usage, evalStart, evalOngoing, evalEnd, usage, idle)
}

// TestOutcomeGraderWaitsForBudget: grader requests are model requests: with the budget reached by the agent's
// request, the evaluation waits (the session idles budget_reached), and a raised budget resumes the grading
// without a client event; the grader's usage counts in the session's list cost.
func TestOutcomeGraderWaitsForBudget(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.start(f.config())
	id := f.session()
	ctx := context.Background()
	budget := func(cents string) json.RawMessage {
		return json.RawMessage(`{"type":"limit","max_list_cost":{"amount":"` + cents + `","currency":"USD"}}`)
	}
	if _, err := f.store.SessionUpdate(ctx, id, func(s *apitype.Session) error { s.Budget = budget("1"); return nil }); err != nil {
		t.Fatal(err)
	}
	f.srv.Script(modeltest.Turn{Text: "done", Usage: modeltest.Usage{InputTokens: 1000, OutputTokens: 500}}, verdictTurn("satisfied", "ok"))
	f.send(id, defineOutcome, outcomeDef(3))
	evs := f.waitIdle(id, 1)
	assertTypes(t, evs[len(evs)-3:], apitype.EventSessionUsage, evalStart, idle)
	assertStop(t, evs[len(evs)-1], apitype.StopBudgetReached)
	if n := len(f.srv.Requests()); n != 1 {
		t.Fatalf("%d requests while paused", n)
	}
	if _, err := f.store.SessionUpdate(ctx, id, func(s *apitype.Session) error { s.Budget = budget("100"); return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.EventAppend(ctx, &store.EventAppendParams{SessionID: id, Wake: true,
		Events: []apitype.NewEvent{{Type: apitype.EventSessionUpdated, Data: json.RawMessage(`{"budget":` + string(budget("100")) + `}`), Processed: true}}}); err != nil {
		t.Fatal(err)
	}
	evs = f.waitIdle(id, 2)
	assertTypes(t, evs[len(evs)-6:], apitype.EventSessionUpdated, running, evalOngoing, evalEnd, apitype.EventSessionUsage, idle)
	assertStop(t, evs[len(evs)-1], apitype.StopEndTurn)
	sess, err := f.store.SessionGet(ctx, id)
	// 1000 in / 500 out, then the grader's 100 in / 20 out, at $3 / $15 per million.
	if want := int64(1100*3_000_000 + 520*15_000_000); err != nil || sess.Usage.ListCostPicodollars != want {
		t.Fatalf("usage %v %+v, want %d picodollars", err, sess.Usage, want)
	}
}

// TestOutcomeGraderReadsWorkspace: in a session with the built-in toolset the grader is offered the hands' read,
// glob and grep (never bash, write or edit), its reads run in the session's sandbox and their results go to its
// next request; a call of any other tool is refused without running. Its usage sums its requests.
func TestOutcomeGraderReadsWorkspace(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.start(f.config())
	id := f.session(toolset)
	f.srv.Script(modeltest.Turn{Text: "I wrote report.txt"},
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "read", Input: `{"file_path":"/workspace/report.txt"}`},
			{Name: "bash", Input: `{"command":"rm -rf /workspace"}`}}, Usage: modeltest.Usage{InputTokens: 100, OutputTokens: 20}},
		verdictTurn("satisfied", "The report is there."))
	f.send(id, defineOutcome, outcomeDef(3))
	evs := f.waitIdle(id, 1)
	ends := ofType(evs, evalEnd)
	if len(ends) != 1 {
		t.Fatalf("log %v", types(evs))
	}
	if d := decode[apitype.OutcomeEvaluationEnd](t, ends[0]); d.Result != apitype.OutcomeSatisfied || d.Usage.InputTokens != 200 || d.Usage.OutputTokens != 40 {
		t.Errorf("evaluation end %s", ends[0].Data)
	}
	f.hands.mu.Lock()
	calls := slices.Clone(f.hands.calls)
	f.hands.mu.Unlock()
	if len(calls) != 1 || !strings.HasPrefix(calls[0], "read ") {
		t.Fatalf("hands ran %q, want the grader's read alone", calls)
	}
	reqs := f.srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests", len(reqs))
	}
	var offered []string
	for _, tl := range reqs[1].Tools {
		offered = append(offered, tl.Name)
	}
	slices.Sort(offered)
	if !slices.Equal(offered, []string{"glob", "grep", "read", "record_evaluation"}) {
		t.Errorf("grader offered %v", offered)
	}
	if b := string(reqs[2].Body); !strings.Contains(b, "ran read") || !strings.Contains(b, "may only call record_evaluation") {
		t.Errorf("the grader's second request lacks its read's result or the refusal: %s", b)
	}
	if n := len(ofType(evs, toolUse)); n != 0 {
		t.Errorf("%d agent.tool_use events: the grader's calls are not the agent's", n)
	}
}
