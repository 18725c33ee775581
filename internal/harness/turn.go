package harness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/store"
)

// errTurnEnded: a model request failed for good; the session error and the idle are in the log.
var errTurnEnded = errors.New("harness: turn ended by a model error")

// modelTurn makes the next model call of a turn and appends its outputs. A session that is idle, or was
// rescheduled, is announced running first. The client messages the call includes are marked processed with
// the call's start: processed_at says when the model picked them up. Both ride on the append of the call's
// span.model_request_start (see lead).
func (r *run) modelTurn(st *state, msgs []apitype.Event) error {
	r.lead = &lead{processed: msgs}
	if st.status != apitype.EventSessionStatusRunning {
		r.lead.events = []apitype.NewEvent{mustEvent(apitype.EventSessionStatusRunning, nil)}
		r.lead.status = apitype.StatusRunning
	}
	if err := r.provisionEagerly(); err != nil {
		return err
	}
	req, err := r.request(false)
	if err != nil {
		return r.endedOK(err)
	}
	resp, startID, ids, err := r.call(req, true, func() (*model.Request, error) { return r.request(true) })
	if err != nil {
		return r.endedOK(err)
	}
	return r.appendResponse(resp, startID, ids)
}

// provisionEagerly, with Config.EagerHands, makes sure the session's sandbox exists before the model call, the
// way a coupled design provisions a container before it can call the model. Lazy hands (the default) skip it.
// The session is announced running first, so the provisioning shows inside the turn.
func (r *run) provisionEagerly() error {
	p, ok := r.b.cfg.Hands.(sandbox.Provisioner)
	if !r.b.cfg.EagerHands || !ok || !r.tools.hasBuiltin() {
		return nil
	}
	if len(r.lead.events) > 0 {
		if _, err := r.append("", nil); err != nil {
			return err
		}
	}
	if err := p.Provision(r.ctx, &sandbox.Call{Recipe: r.recipe(), OnProvision: r.provisionReporter()}); err != nil {
		r.b.cfg.Logger.Warn("eager sandbox provisioning failed", "session_id", r.sess.ID, "err", err)
	}
	return nil
}

// endedOK turns the errors after which the log already says what happened (the turn ended, or an interrupt
// that the next step handles) into success.
func (r *run) endedOK(err error) error {
	if errors.Is(err, errTurnEnded) || errors.Is(err, errInterrupted) {
		return nil
	}
	return err
}

// newRequest is a model request with the session's agent settings.
func (r *run) newRequest(msgs []model.Message) *model.Request {
	return &model.Request{
		Model:            r.sess.Agent.Model.ID,
		System:           r.sess.Agent.System,
		Messages:         msgs,
		Tools:            r.tools.specs,
		MaxTokens:        r.b.cfg.MaxTokens,
		ThinkingBudget:   r.b.cfg.ThinkingBudget,
		CacheBreakpoints: true,
	}
}

// request builds the next model request from the tail. When its estimated size passes CompactAt of the
// context window, or force is set (the model said the prompt is too long), the older part of the conversation
// is compacted first.
func (r *run) request(force bool) (*model.Request, error) {
	turns, err := transcript(r.tail)
	if err != nil {
		return nil, err
	}
	req := r.newRequest(messages(turns))
	if !force && estimateTokens(req) <= r.compactLimit() {
		return req, nil
	}
	keep := r.compactLimit() / 3
	if force {
		keep = 0 // the estimate was wrong: keep as little as possible verbatim
	}
	compacted, err := r.compact(turns, keep)
	if err != nil || !compacted {
		return req, err
	}
	if turns, err = transcript(r.tail); err != nil {
		return nil, err
	}
	return r.newRequest(messages(turns)), nil
}

func (r *run) compactLimit() int { return int(float64(r.b.cfg.ContextTokens) * r.b.cfg.CompactAt) }

// Compaction prompts.
const (
	summarySystem = "You compact the history of a long-running agent session. Another instance of the agent will " +
		"continue the work with only your summary and the most recent turns, so leave out nothing it needs."
	summaryInstruction = "Summarise the conversation above for the agent that continues it: the user's goals and " +
		"instructions, decisions taken, facts and tool results that still matter (file paths, commands, errors), " +
		"and what remains to be done. Answer with the summary only."
)

// compact summarises the older part of the conversation with the model and appends
// agent.thread_context_compacted with the summary and the last sequence number it covers. The most recent turns
// stay verbatim; a tool call is never separated from its result. The log itself is not rewritten. It reports
// false when there is nothing to compact. The kept turns fit in keepTokens where a valid cut allows it.
func (r *run) compact(turns []transcriptTurn, keepTokens int) (bool, error) {
	split := compactionSplit(turns, keepTokens)
	if split <= 0 {
		return false, nil
	}
	prefix := messages(turns[:split])
	instruction := model.Block{Type: model.BlockText, Text: summaryInstruction}
	if last := &prefix[len(prefix)-1]; last.Role == "user" {
		last.Content = append(append([]model.Block(nil), last.Content...), instruction)
	} else {
		prefix = append(prefix, model.Message{Role: "user", Content: []model.Block{instruction}})
	}
	req := r.newRequest(prefix)
	req.System, req.ThinkingBudget = summarySystem, 0
	resp, startID, _, err := r.call(req, false, nil)
	if err != nil {
		return false, err
	}
	var summary strings.Builder
	for _, b := range resp.Content {
		if b.Type == model.BlockText {
			summary.WriteString(b.Text)
		}
	}
	if strings.TrimSpace(summary.String()) == "" {
		// An empty summary would drop the history: keep the conversation as it is.
		_, err := r.append("", r.addUsage(resp.Usage), spanEnd(startID, false, resp.Usage))
		return false, err
	}
	upTo := int64(0)
	for _, t := range turns[:split] {
		upTo = max(upTo, t.maxSeq)
	}
	_, err = r.append("", r.addUsage(resp.Usage),
		spanEnd(startID, false, resp.Usage),
		mustEvent(apitype.EventAgentContextCompacted, apitype.ContextCompacted{Summary: summary.String(), UpToSeq: upTo}),
	)
	if err != nil {
		return false, err
	}
	r.tail.compactTo(summary.String(), upTo)
	return true, nil
}

// compactionSplit picks where to cut the conversation: turns[:i] are summarised, turns[i:] kept verbatim. It
// keeps as much as fits in keepTokens, and at least the last turn. A cut is valid only where no tool_use before
// it has its result after it, and where every event before it precedes every event after it in the log. 0
// means no valid cut.
func compactionSplit(turns []transcriptTurn, keepTokens int) int {
	valid := func(i int) bool {
		if t := turns[i].msg; t.Role == "user" {
			for _, b := range t.Content {
				if b.Type == model.BlockToolResult {
					return false
				}
			}
		}
		var before int64
		for _, t := range turns[:i] {
			before = max(before, t.maxSeq)
		}
		for _, t := range turns[i:] {
			if t.minSeq <= before {
				return false
			}
		}
		return true
	}
	latest := 0
	for i := 1; i < len(turns); i++ {
		if !valid(i) {
			continue
		}
		kept := 0
		for _, t := range turns[i:] {
			kept += blocksChars(t.msg.Content) / 4
		}
		if kept <= keepTokens {
			return i
		}
		latest = i
	}
	return latest
}

// call makes one model request under the retry policy; retries live here and nowhere else. Each attempt is a
// span.model_request_start; a failed attempt is closed with span.model_request_end is_error. A retryable error
// appends session.error (retrying) and session.status_rescheduled, backs off (honouring the provider's
// retry-after), and tries again after session.status_running. When retries run out, or the error is not
// retryable, it appends session.error (exhausted) and idles the session with retries_exhausted, and returns
// errTurnEnded. When the model says the prompt is too long, shrink (if set) gives a compacted request to try
// once instead.
//
// With preview set, each attempt publishes stream previews of the answer while it streams (see previewer); a
// failed or interrupted attempt publishes nothing more, and its span.model_request_end closes its previews.
//
// On success it returns the response, the id of the open span.model_request_start (the caller closes it
// together with what it appends) and the ids the previews gave the answer's events, by content block index.
func (r *run) call(req *model.Request, preview bool, shrink func() (*model.Request, error)) (*model.Response, string, map[int]string, error) {
	for attempt := 0; ; attempt++ {
		start, err := r.append("", nil, mustEvent(apitype.EventSpanModelRequestStart, nil))
		if err != nil {
			return nil, "", nil, err
		}
		startID := start[0].ID
		ctx, done := r.watchInterrupts()
		var pv *previewer
		var onDelta func(model.Delta)
		if preview && r.b.cfg.PreviewInterval > 0 {
			pv = r.newPreviewer()
			onDelta = pv.onDelta
		}
		callCtx, cancelCall := context.WithTimeoutCause(ctx, r.b.cfg.ModelTimeout, errModelTimeout)
		resp, err := r.b.cfg.Model.Call(callCtx, req, onDelta)
		timedOut := errors.Is(context.Cause(callCtx), errModelTimeout)
		cancelCall()
		interrupted := done()
		if err == nil && !interrupted {
			return resp, startID, pv.finish(true), nil
		}
		if timedOut && !interrupted {
			// A stalled stream: retried like a dropped connection.
			err = &model.Error{Kind: model.ErrServer, Err: fmt.Errorf("no complete answer within %v", r.b.cfg.ModelTimeout)}
		}
		pv.finish(false)
		if r.ctx.Err() != nil {
			return nil, "", nil, fmt.Errorf("model call: %w", r.ctx.Err())
		}
		failed := spanEnd(startID, true, apitype.SpanUsage{})
		if interrupted {
			// No partial message: the interrupt step ends the turn.
			if _, err := r.append("", nil, failed); err != nil {
				return nil, "", nil, err
			}
			return nil, "", nil, errInterrupted
		}
		var me *model.Error
		if !errors.As(err, &me) {
			me = &model.Error{Kind: model.ErrServer, Err: err}
		}
		if me.Kind == model.ErrContextTooLong && shrink != nil {
			if _, err := r.append("", nil, failed); err != nil {
				return nil, "", nil, err
			}
			if req, err = shrink(); err != nil {
				return nil, "", nil, err
			}
			shrink = nil
			attempt--
			continue
		}
		body := apitype.SessionErrorBody{Type: sessionErrorType(me), Message: errorMessage(me)}
		if me.Retryable() && attempt < r.b.cfg.Retry.MaxRetries {
			body.RetryStatus.Type = "retrying"
			_, err := r.append(apitype.StatusRescheduling, nil, failed,
				mustEvent(apitype.EventSessionError, apitype.SessionError{Error: body}),
				mustEvent(apitype.EventSessionStatusRescheduled, nil))
			if err != nil {
				return nil, "", nil, err
			}
			if err := r.backoff(attempt, me.RetryAfter); err != nil {
				return nil, "", nil, err
			}
			if _, err := r.append(apitype.StatusRunning, nil, mustEvent(apitype.EventSessionStatusRunning, nil)); err != nil {
				return nil, "", nil, err
			}
			continue
		}
		body.RetryStatus.Type = "exhausted"
		_, err = r.append(apitype.StatusIdle, nil, failed,
			mustEvent(apitype.EventSessionError, apitype.SessionError{Error: body}),
			idleEvent(apitype.StopReason{Type: apitype.StopRetriesExhausted}))
		if err != nil {
			return nil, "", nil, err
		}
		return nil, "", nil, errTurnEnded
	}
}

// errModelTimeout cancels a model call that has not finished within Config.ModelTimeout.
var errModelTimeout = errors.New("harness: model call timed out")

// backoff waits before retry attempt+1: exponential from BaseDelay with jitter, capped at MaxDelay, and never
// shorter than the provider's retry-after. An interrupt cuts it short (errInterrupted).
func (r *run) backoff(attempt int, retryAfter time.Duration) error {
	p := r.b.cfg.Retry
	d := p.BaseDelay << min(attempt, 30)
	if d <= 0 || d > p.MaxDelay {
		d = p.MaxDelay
	}
	d = d/2 + rand.N(d/2+1) // jitter in [d/2, d]
	d = max(d, retryAfter)
	ctx, done := r.watchInterrupts()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	if done() {
		return errInterrupted
	}
	if r.ctx.Err() != nil {
		return fmt.Errorf("backoff: %w", r.ctx.Err())
	}
	return nil
}

// sessionErrorType maps a model error to the session.error type clients know.
func sessionErrorType(e *model.Error) string {
	switch e.Kind {
	case model.ErrOverloaded:
		return apitype.SessionErrModelOverloaded
	case model.ErrRateLimited:
		return apitype.SessionErrModelRateLimited
	default:
		return apitype.SessionErrModelRequestFailed
	}
}

// errorMessage says what went wrong, and for configuration errors what to configure.
func errorMessage(e *model.Error) string {
	switch {
	case errors.Is(e, model.ErrNoCredentials):
		return "The model request was not sent: " + model.ErrNoCredentials.Error() + "."
	case e.Kind == model.ErrAuth:
		return fmt.Sprintf("The model provider rejected the credentials (%v). Check the API key this server is configured with.", e.Err)
	case e.Kind == model.ErrInvalid:
		return fmt.Sprintf("The model provider rejected the request (%v).", e.Err)
	case e.Kind == model.ErrContextTooLong:
		return fmt.Sprintf("The conversation is too long for the model even after compaction (%v).", e.Err)
	case e.Kind == model.ErrOverloaded:
		return fmt.Sprintf("The model is overloaded (%v).", e.Err)
	case e.Kind == model.ErrRateLimited:
		return fmt.Sprintf("The model provider is rate limiting requests (%v).", e.Err)
	}
	return fmt.Sprintf("The model request failed (%v).", e.Err)
}

// appendResponse appends a model answer in order, in one append: agent.thinking per thinking block,
// agent.message per run of text, agent.tool_use (built-in, with the evaluated permission) or
// agent.custom_tool_use per call, then span.model_request_end with the usage, which the session's accumulated
// usage takes in the same write. An answer without tool calls ends the turn in that same append, which also
// releases the lease when no client event is waiting.
//
// ids are the event ids the stream previews gave the answer's agent.thinking and agent.message events, by
// content block index (a message takes the id of its first block with text): the events are appended under
// them, so that clients can match previews and events.
func (r *run) appendResponse(resp *model.Response, startID string, ids map[int]string) error {
	var evs []apitype.NewEvent
	var text []apitype.ContentBlock
	var textID string
	used := map[string]bool{}
	named := func(ev apitype.NewEvent, id string) apitype.NewEvent {
		if id != "" && !used[id] {
			used[id] = true
			ev.ID = id
		}
		return ev
	}
	flushText := func() {
		if len(text) > 0 {
			evs = append(evs, named(mustEvent(apitype.EventAgentMessage, apitype.AgentMessage{Content: text}), textID))
			text = nil
		}
	}
	calls := 0
	for i, b := range resp.Content {
		switch b.Type {
		case model.BlockText:
			if b.Text != "" {
				if len(text) == 0 {
					textID = ids[i]
				}
				text = append(text, apitype.TextBlock(b.Text))
			}
		case model.BlockThinking:
			flushText()
			evs = append(evs, named(mustEvent(apitype.EventAgentThinking,
				apitype.AgentThinking{Thinking: b.Thinking, Signature: b.Signature}), ids[i]))
		case model.BlockRedactedThinking:
			flushText()
			evs = append(evs, mustEvent(apitype.EventAgentThinking, apitype.AgentThinking{Redacted: b.Data}))
		case model.BlockToolUse:
			flushText()
			calls++
			use := apitype.AgentToolUse{Name: b.Name, Input: b.Input, ModelToolUseID: b.ID}
			typ := apitype.EventAgentToolUse
			switch route := r.tools.route(b.Name); route.kind {
			case toolBuiltin:
				use.EvaluatedPermission = permission(route.policy)
				use.Evaluation = &apitype.ToolEvaluation{Type: route.policy}
			case toolCustom:
				typ = apitype.EventAgentCustomToolUse
			default:
				use.EvaluatedPermission = "deny"
			}
			evs = append(evs, mustEvent(typ, use))
		}
	}
	flushText()
	evs = append(evs, spanEnd(startID, false, resp.Usage))
	p := &store.EventAppendParams{Usage: r.addUsage(resp.Usage)}
	if calls == 0 {
		reason := apitype.StopEndTurn
		if resp.StopReason == "refusal" {
			reason = apitype.StopRefusal
		}
		evs = append(evs, idleEvent(apitype.StopReason{Type: reason}))
		// The turn is over: with nothing else waiting, the same write hands the session back.
		p.Status, p.Release = apitype.StatusIdle, r.tail.settled()
	}
	p.Events = evs
	out, err := r.appendP(p)
	if err != nil {
		return err
	}
	for _, e := range out {
		if e.Type != apitype.EventAgentToolUse {
			continue
		}
		var u apitype.AgentToolUse
		if err := e.DecodeData(&u); err == nil && u.EvaluatedPermission == "allow" {
			r.fresh[e.ID] = true
		}
	}
	return nil
}

// addUsage adds a request's usage to the session's and returns the new total, for the append that records it.
func (r *run) addUsage(u apitype.SpanUsage) *apitype.SessionUsage {
	r.usage.InputTokens += u.InputTokens
	r.usage.OutputTokens += u.OutputTokens
	r.usage.CacheReadInputTokens += u.CacheReadInputTokens
	if u.CacheCreationInputTokens > 0 {
		cc := apitype.CacheCreation{}
		if r.usage.CacheCreation != nil {
			cc = *r.usage.CacheCreation
		}
		cc.Ephemeral5mInputTokens += u.CacheCreationInputTokens
		r.usage.CacheCreation = &cc
	}
	total := r.usage
	return &total
}
