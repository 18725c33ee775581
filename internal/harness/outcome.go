package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/store"
)

// Outcomes: a user.define_outcome gives the agent a task (its description) and a rubric. The brain picks it up
// like a message and the agent works. When the agent's turn ends, instead of idling, the brain appends
// span.outcome_evaluation_start (the session stays running) and a grader evaluates the work in a context window
// of its own: one model request (Config.GraderModel, the agent's model by default) with GraderSystemPrompt,
// the task, the rubric and what the agent said and did in this iteration, which gives its verdict by calling
// the tool record_evaluation. span.outcome_evaluation_ongoing is appended before each grader request, and
// span.outcome_evaluation_end with the result, the explanation and the grader's usage (counted in the
// session's usage and list cost like any model request) after it. A needs_revision verdict goes back to the
// agent as a message (see transcript) and a revision turn starts without a client event, until
// max_iterations evaluations have been made (max_iterations_reached). A grader whose model fails ends the
// outcome failed, with the reason; a user.interrupt while it grades ends it interrupted.
//
// Every step is in the log before the brain acts on it: an evaluation_start without its end means grade (again):
// a brain that crashed while grading leaves exactly that, and the next brain grades once more; the end is
// appended once, fenced by the lease like every append.

// GraderSystemPrompt is the grader's system prompt.
const GraderSystemPrompt = "You are the grader of an AI agent's work. You are given the task the agent was " +
	"asked to do, a rubric, and what the agent said and did while working on it. You do not do the task " +
	"yourself and you cannot talk to the agent: you judge its work. Score each criterion of the rubric " +
	"separately, strictly and on the evidence only: a criterion the work does not show to be met is not met. " +
	"Then give your verdict by calling the tool record_evaluation exactly once: result \"satisfied\" when " +
	"every criterion is met, \"needs_revision\" otherwise, with an explanation the agent can act on (what is " +
	"missing or wrong, and what to change) and one entry per criterion in criteria."

// recordEvaluation is the grader's one tool.
const recordEvaluation = "record_evaluation"

var recordEvaluationSpec = model.ToolSpec{
	Name:        recordEvaluation,
	Description: "Record your verdict on the agent's work against the rubric. Call it exactly once.",
	InputSchema: json.RawMessage(`{"type":"object","properties":{` +
		`"result":{"type":"string","enum":["satisfied","needs_revision"],"description":"satisfied when every criterion is met, needs_revision otherwise"},` +
		`"explanation":{"type":"string","description":"why; for needs_revision, what the agent must change"},` +
		`"criteria":{"type":"array","items":{"type":"object","properties":{` +
		`"criterion":{"type":"string"},"met":{"type":"boolean"},"explanation":{"type":"string"}},` +
		`"required":["criterion","met","explanation"]}}},` +
		`"required":["result","explanation","criteria"]}`),
}

// outcomeEvents are the event types the outcome's state is derived from.
var outcomeEvents = []apitype.EventType{apitype.EventUserDefineOutcome, apitype.EventSpanOutcomeEvaluationStart,
	apitype.EventSpanOutcomeEvaluationEnd}

// lastOutcome returns the events of evs (outcome events, in order) from the last processed definition on: all
// that the current outcome's state needs.
func lastOutcome(evs []apitype.Event) []apitype.Event {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type == apitype.EventUserDefineOutcome && evs[i].ProcessedAt != nil {
			return evs[i:]
		}
	}
	return nil
}

// outcome is the session's active outcome, as the log says: a processed user.define_outcome whose evaluations
// have not ended it.
type outcome struct {
	def apitype.DefineOutcome
	// seq is where the current iteration's work starts: the define_outcome, or the last evaluation's end.
	seq       int64
	iteration int
	// evaluating is the open span.outcome_evaluation_start of the current iteration (nil while the agent works).
	evaluating *apitype.Event
}

func deriveDefineOutcome(s *state, e apitype.Event) error {
	if e.ProcessedAt == nil {
		return nil
	}
	var d apitype.DefineOutcome
	if err := e.DecodeData(&d); err != nil {
		return err
	}
	s.outcome = &outcome{def: d, seq: e.Seq}
	s.lastSide = "user"
	return nil
}

func deriveEvaluationStart(s *state, e apitype.Event) error {
	var sp apitype.OutcomeEvaluationSpan
	if err := e.DecodeData(&sp); err != nil {
		return err
	}
	if s.outcome != nil && s.outcome.def.OutcomeID == sp.OutcomeID {
		s.outcome.evaluating, s.outcome.iteration = &e, sp.Iteration
	}
	return nil
}

func deriveEvaluationEnd(s *state, e apitype.Event) error {
	var end apitype.OutcomeEvaluationEnd
	if err := e.DecodeData(&end); err != nil {
		return err
	}
	if s.outcome == nil || s.outcome.def.OutcomeID != end.OutcomeID {
		return nil
	}
	if end.Result != apitype.OutcomeNeedsRevision {
		s.outcome = nil
		return nil
	}
	// The explanation goes back to the agent: the conversation's last content is the user's side.
	s.outcome.evaluating, s.outcome.iteration, s.outcome.seq = nil, end.Iteration+1, e.Seq
	s.lastSide = "user"
	return nil
}

// evaluationStart is the event that starts grading the active outcome's current iteration.
func (o *outcome) evaluationStart() apitype.NewEvent {
	return mustEvent(apitype.EventSpanOutcomeEvaluationStart, apitype.OutcomeEvaluationSpan{OutcomeID: o.def.OutcomeID, Iteration: o.iteration})
}

// evaluationEnd is the span.outcome_evaluation_end of the current iteration.
func (o *outcome) evaluationEnd(result apitype.OutcomeResult, explanation string) apitype.OutcomeEvaluationEnd {
	end := apitype.OutcomeEvaluationEnd{OutcomeID: o.def.OutcomeID, Iteration: o.iteration, Result: result, Explanation: explanation}
	if o.evaluating != nil {
		end.OutcomeEvaluationStartID = o.evaluating.ID
	}
	return end
}

// grade is the step that grades an outcome whose evaluation started and has not ended (after the agent's turn
// ended, or after a brain crashed while grading).
func (t *thread) grade(st *state) (bool, error) {
	o := st.outcome
	if o == nil || o.evaluating == nil {
		return false, nil
	}
	// Grader requests are model requests: they wait for a raised or removed budget too.
	if handled, err := t.holdForBudget(st); handled || err != nil {
		return handled, err
	}
	req, err := t.graderRequest(o)
	if err != nil {
		return true, err
	}
	announce := st.status != apitype.EventSessionStatusRunning
	p := &store.EventAppendParams{}
	var usage []apitype.NewEvent
	var spent apitype.SpanUsage // the grader's requests'
	var end apitype.OutcomeEvaluationEnd
	for round := 1; ; round++ {
		resp, gerr := t.callGrader(o, req, announce)
		announce = false
		if errors.Is(gerr, errInterrupted) {
			return true, nil // the interrupt step ends the evaluation
		}
		if t.ctx.Err() != nil {
			return true, fmt.Errorf("grade: %w", t.ctx.Err())
		}
		if resp != nil {
			p.Usage, usage = t.addUsageFor(resp, req.Model)
			spent = addSpan(spent, resp.Usage)
		}
		if gerr != nil {
			end = o.evaluationEnd(apitype.OutcomeFailed, "The grader's model request failed: "+gerr.Error())
			break
		}
		v, why := verdict(resp)
		if v != nil {
			end = o.evaluationEnd(v.Result, v.Explanation)
			end.Criteria = v.Criteria
			if v.Result == apitype.OutcomeNeedsRevision && o.iteration+1 >= o.def.MaxIterations {
				end.Result = apitype.OutcomeMaxIterationsReached
			}
			break
		}
		results, err := t.graderReads(resp)
		if errors.Is(err, errInterrupted) {
			return true, nil
		}
		if err != nil {
			return true, err
		}
		if len(results) == 0 || round >= maxGraderRounds {
			if len(results) > 0 {
				why = fmt.Sprintf("The grader gave no verdict within %d requests.", maxGraderRounds)
			}
			end = o.evaluationEnd(apitype.OutcomeFailed, why)
			break
		}
		// The grader read the workspace: its next request carries what it read.
		req.Messages = append(req.Messages, model.Message{Role: "assistant", Content: resp.Content},
			model.Message{Role: "user", Content: results})
	}
	end.Usage = spent
	p.Events = append([]apitype.NewEvent{mustEvent(apitype.EventSpanOutcomeEvaluationEnd, end)}, usage...)
	if end.Result != apitype.OutcomeNeedsRevision {
		// The outcome is over, and so is the turn.
		p.Events = append(p.Events, idleEvent(apitype.StopReason{Type: apitype.StopEndTurn}))
		p.Status, p.Release = apitype.StatusIdle, t.tail.settled()
	}
	_, err = t.appendP(p)
	return true, err
}

// callGrader makes the grader's request under the retry policy (without the conversation's session.error
// events: a grader that fails for good fails the evaluation), each attempt announced by a
// span.outcome_evaluation_ongoing (led by session.status_running when the session was not running: a grade
// resumed after a budget pause). An interrupt cancels it (errInterrupted).
func (t *thread) callGrader(o *outcome, req *model.Request, announce bool) (*model.Response, error) {
	for attempt := 0; ; attempt++ {
		ongoing := mustEvent(apitype.EventSpanOutcomeEvaluationOngoing,
			apitype.OutcomeEvaluationSpan{OutcomeID: o.def.OutcomeID, Iteration: o.iteration})
		evs := []apitype.NewEvent{ongoing}
		status := ""
		if announce {
			evs, status, announce = append([]apitype.NewEvent{mustEvent(apitype.EventSessionStatusRunning, nil)}, evs...), apitype.StatusRunning, false
		}
		if _, err := t.append(status, nil, evs...); err != nil {
			return nil, err
		}
		ctx, done := t.watchInterrupts()
		callCtx, cancel := context.WithTimeoutCause(ctx, t.b.cfg.ModelTimeout, errModelTimeout)
		stop := t.heartbeat(callCtx, ongoing)
		resp, err := t.b.cfg.Model.Call(callCtx, req, nil)
		stop()
		timedOut := errors.Is(context.Cause(callCtx), errModelTimeout)
		cancel()
		interrupted := done()
		t.recordModel(req.Model, 0, resp, err, interrupted, timedOut)
		switch {
		case interrupted:
			return nil, errInterrupted
		case err == nil:
			return resp, nil
		case t.ctx.Err() != nil:
			return nil, t.ctx.Err()
		}
		if timedOut {
			err = &model.Error{Kind: model.ErrServer, Err: fmt.Errorf("no complete answer within %v", t.b.cfg.ModelTimeout)}
		}
		var me *model.Error
		if !errors.As(err, &me) || !me.Retryable() || attempt >= t.b.cfg.Retry.MaxRetries {
			if me != nil {
				return nil, errors.New(errorMessage(me))
			}
			return nil, err
		}
		if err := t.backoff(attempt, me.RetryAfter); err != nil {
			return nil, err
		}
	}
}

// heartbeat appends ev every GraderHeartbeat until the returned function is called (which waits for it) or ctx
// ends. It appends while the thread's goroutine waits for the grader, and stops before that goroutine goes on.
func (t *thread) heartbeat(ctx context.Context, ev apitype.NewEvent) func() {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(t.b.cfg.GraderHeartbeat)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				if _, err := t.append("", nil, ev); err != nil {
					return // a lost lease cancels the run, and with it the grader's request
				}
			}
		}
	})
	return func() {
		close(stop)
		wg.Wait()
	}
}

// maxGraderRounds bounds the grader's requests in one evaluation (it reads the workspace between them).
const maxGraderRounds = 10

// graderToolNames are the hands' tools the grader may use: it reads the workspace, never changes it.
var graderToolNames = []string{"read", "glob", "grep"}

// graderTools are the read-only tools the grader is offered: the hands' own definitions, for a session whose
// agent has the built-in toolset run by this brain's hands (a self_hosted environment's workspace is the user's
// worker's, which the grader does not reach).
func (t *thread) graderTools() []model.ToolSpec {
	if t.b.cfg.Hands == nil || t.builtin() != execHands ||
		!slices.ContainsFunc(t.agent.Tools, func(x apitype.Tool) bool { return x.Type == apitype.ToolTypeAgentToolset }) {
		return nil
	}
	var out []model.ToolSpec
	for _, tl := range t.b.cfg.Hands.Tools() {
		if slices.Contains(graderToolNames, tl.Name) {
			out = append(out, model.ToolSpec{Name: tl.Name, Description: tl.Description, InputSchema: tl.InputSchema})
		}
	}
	return out
}

// graderReads runs the grader's read-only tool calls in the session's sandbox and returns their tool_result
// blocks (none when it called no tool). A call of any other tool is refused without running. These calls are
// not in the log: they change nothing, and a brain that grades again after a crash may repeat them.
func (t *thread) graderReads(resp *model.Response) ([]model.Block, error) {
	var out []model.Block
	for _, b := range resp.Content {
		if b.Type != model.BlockToolUse {
			continue
		}
		res := model.Block{Type: model.BlockToolResult, ToolUseID: b.ID}
		if !slices.Contains(graderToolNames, b.Name) || t.b.cfg.Hands == nil {
			res.IsError = true
			res.Content = []model.Block{{Type: model.BlockText, Text: "The grader may only call record_evaluation, read, glob and grep."}}
			out = append(out, res)
			continue
		}
		input := b.Input
		if len(input) == 0 {
			input = json.RawMessage("{}")
		}
		ctx, done := t.watchInterrupts()
		r, err := t.b.cfg.Hands.Execute(ctx, &sandbox.Call{Recipe: t.recipe(), Name: b.Name, Input: input})
		if done() {
			return nil, errInterrupted
		}
		if t.ctx.Err() != nil {
			return nil, context.Cause(t.ctx)
		}
		res.IsError = r.IsError || err != nil
		res.Content = resultBlocks(r.Content)
		if err != nil && len(res.Content) == 0 {
			res.Content = []model.Block{{Type: model.BlockText, Text: fmt.Sprintf("The sandbox failed: %v", err)}}
		}
		out = append(out, res)
	}
	return out, nil
}

// addSpan adds b's token counts to a's.
func addSpan(a, b apitype.SpanUsage) apitype.SpanUsage {
	a.InputTokens += b.InputTokens
	a.OutputTokens += b.OutputTokens
	a.CacheCreationInputTokens += b.CacheCreationInputTokens
	a.CacheReadInputTokens += b.CacheReadInputTokens
	return a
}

// gradedVerdict is record_evaluation's input.
type gradedVerdict struct {
	Result      apitype.OutcomeResult      `json:"result"`
	Explanation string                     `json:"explanation"`
	Criteria    []apitype.CriterionVerdict `json:"criteria"`
}

// verdict reads the grader's record_evaluation call out of its answer; without a valid one, it says why.
func verdict(resp *model.Response) (*gradedVerdict, string) {
	for _, b := range resp.Content {
		if b.Type != model.BlockToolUse || b.Name != recordEvaluation {
			continue
		}
		var v gradedVerdict
		if err := json.Unmarshal(b.Input, &v); err != nil {
			return nil, fmt.Sprintf("The grader called record_evaluation with input that is not valid: %v.", err)
		}
		if v.Result != apitype.OutcomeSatisfied && v.Result != apitype.OutcomeNeedsRevision {
			return nil, fmt.Sprintf("The grader called record_evaluation with result %q, not \"satisfied\" or \"needs_revision\".", v.Result)
		}
		return &v, ""
	}
	return nil, "The grader answered without calling record_evaluation, so it gave no verdict."
}

// graderRequest is the grader's request: its own context window, with the task, the rubric and the work of the
// current iteration.
func (t *thread) graderRequest(o *outcome) (*model.Request, error) {
	var rubric struct {
		Content string `json:"content"`
		FileID  string `json:"file_id"`
	}
	if err := json.Unmarshal(o.def.Rubric, &rubric); err != nil {
		return nil, fmt.Errorf("outcome %s: rubric: %w", o.def.OutcomeID, err)
	}
	if rubric.Content == "" {
		rubric.Content = "(the rubric file " + rubric.FileID + " could not be read)"
	}
	work, err := t.iterationWork(o)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "<task>\n%s\n</task>\n\n<rubric>\n%s\n</rubric>\n\n", o.def.Description, rubric.Content)
	fmt.Fprintf(&b, "This is evaluation %d of at most %d.\n\n<agent_work>\n%s</agent_work>\n\n", o.iteration+1, o.def.MaxIterations, work)
	tools := t.graderTools()
	if len(tools) > 0 {
		b.WriteString("You may read the agent's workspace, as the agent left it, with read, glob and grep to check " +
			"its work; you cannot change it. ")
	}
	b.WriteString("Grade the work against each criterion of the rubric and call record_evaluation.")
	m := t.b.cfg.GraderModel
	if m == "" {
		m = t.agent.Model.ID
	}
	return &model.Request{
		Model:     m,
		System:    GraderSystemPrompt,
		Messages:  []model.Message{{Role: "user", Content: []model.Block{{Type: model.BlockText, Text: b.String()}}}},
		Tools:     append([]model.ToolSpec{recordEvaluationSpec}, tools...),
		MaxTokens: t.b.cfg.MaxTokens,
	}, nil
}

// maxWorkField bounds each tool input or result the grader sees.
const maxWorkField = 2000

// iterationWork is what the agent said and did since the iteration started: its messages in full, its tool calls
// and their results shortened.
func (t *thread) iterationWork(o *outcome) (string, error) {
	var b strings.Builder
	for _, e := range t.tail.events {
		if e.Seq <= o.seq {
			continue
		}
		switch e.Type {
		case apitype.EventAgentMessage:
			var m apitype.AgentMessage
			if err := e.DecodeData(&m); err != nil {
				return "", err
			}
			b.WriteString("[agent message]\n")
			for _, c := range m.Content {
				if c.Type == apitype.ContentText {
					b.WriteString(c.Text)
					b.WriteString("\n")
				}
			}
		case apitype.EventAgentToolUse, apitype.EventAgentMCPToolUse, apitype.EventAgentCustomToolUse:
			var u apitype.AgentToolUse
			if err := e.DecodeData(&u); err != nil {
				return "", err
			}
			fmt.Fprintf(&b, "[tool call %s] %s\n", u.Name, shorten(string(u.Input), maxWorkField))
		case apitype.EventAgentToolResult, apitype.EventAgentMCPToolResult:
			var r apitype.AgentToolResult
			if err := e.DecodeData(&r); err != nil {
				return "", err
			}
			fmt.Fprintf(&b, "[tool result%s] %s\n", map[bool]string{true: " (error)"}[r.IsError], shorten(contentText(r.Content), maxWorkField))
		}
	}
	return b.String(), nil
}

func contentText(content []apitype.ContentBlock) string {
	var s []string
	for _, c := range content {
		if c.Type == apitype.ContentText {
			s = append(s, c.Text)
		}
	}
	return strings.Join(s, "\n")
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// outcomeTask is the user turn a define_outcome puts in the agent's conversation: the description as the task,
// with the rubric it will be graded against.
func outcomeTask(d apitype.DefineOutcome) string {
	var rubric struct {
		Content string `json:"content"`
	}
	_ = json.Unmarshal(d.Rubric, &rubric)
	s := d.Description
	if rubric.Content != "" {
		s += "\n\nWhen you finish, a grader will check your work against this rubric:\n" + rubric.Content
	}
	return s
}

// revisionNote is the user turn a needs_revision verdict puts in the agent's conversation.
func revisionNote(end apitype.OutcomeEvaluationEnd) string {
	return fmt.Sprintf("A grader reviewed your work against the rubric and found that it needs revision "+
		"(evaluation %d). Its explanation:\n%s\n\nRevise your work accordingly.", end.Iteration+1, end.Explanation)
}
