package harness

import (
	"errors"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/store"
)

// errTurnEnded: a model request failed for good; the session error and the idle are in the log.
var errTurnEnded = errors.New("harness: turn ended by a model error")

// modelTurn makes the next model call of a turn and appends its outputs. A session that is idle, or was
// rescheduled, is announced running first. The client messages the call includes are marked processed with
// the call's start: processed_at says when the model picked them up. Both ride on the append of the call's
// span.model_request_start (see lead).
func (t *thread) modelTurn(st *state, msgs []apitype.Event) error {
	t.lead = &lead{processed: msgs}
	for _, e := range msgs {
		if e.Type == apitype.EventUserDefineOutcome {
			// This call picks the definition up: the outcome is active once the call's start is appended.
			var d apitype.DefineOutcome
			if err := e.DecodeData(&d); err != nil {
				return err
			}
			t.outcome = &outcome{def: d, seq: e.Seq}
		}
	}
	if st.status != apitype.EventSessionStatusRunning {
		t.lead.events = []apitype.NewEvent{mustEvent(apitype.EventSessionStatusRunning, nil)}
		t.lead.status = apitype.StatusRunning
		t.b.cfg.Metrics.Turn()
	}
	if err := t.provisionEagerly(); err != nil {
		return err
	}
	if errs := t.offerMCP(); len(errs) > 0 {
		if t.lead == nil {
			t.lead = &lead{}
		}
		t.lead.events = append(t.lead.events, errs...)
	}
	req, err := t.request(false)
	if err != nil {
		return t.endedOK(err)
	}
	a, err := t.call(req, true, func() (*model.Request, error) { return t.request(true) })
	if err != nil {
		return t.endedOK(err)
	}
	return t.appendResponse(a)
}

// endedOK turns the errors after which the log already says what happened (the turn ended, or an interrupt
// that the next step handles) into success.
func (t *thread) endedOK(err error) error {
	if errors.Is(err, errTurnEnded) || errors.Is(err, errInterrupted) {
		return nil
	}
	return err
}

// appendResponse appends a model answer in order, in one append: agent.thinking per thinking block,
// agent.message per run of text, agent.tool_use (built-in, with the evaluated permission) or
// agent.custom_tool_use per call, then span.model_request_end with the usage, which the session's accumulated
// usage takes in the same write. An answer without tool calls ends the turn in that same append, which also
// releases the lease when no client event is waiting.
//
// The events are appended under the ids the stream previews gave them (answer.ids; a message takes the id of
// its first block with text), so that clients can match previews and events.
func (t *thread) appendResponse(a *answer) error {
	resp, startID, ids := a.resp, a.startID, a.ids
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
	srv := serverCalls{}
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
		case model.BlockServerToolUse, model.BlockWebSearchToolResult:
			flushText()
			evs = append(evs, srv.event(b)...)
		case model.BlockToolUse:
			flushText()
			calls++
			rt := t.tools.route(b.Name)
			evs = append(evs, exec(rt.by).use(&b, rt))
		}
	}
	flushText()
	total, usage := t.addUsage(resp)
	evs = append(append(evs, spanEnd(startID, false, resp.Usage)), usage...)
	p := &store.EventAppendParams{Usage: total}
	// pause_turn: the provider paused a long turn of server tool calls (its web search); the next request sends
	// the answer back as the last, assistant, turn for the model to go on (modelStep: the server call's result
	// is the conversation's last content).
	paused := resp.StopReason == "pause_turn"
	if o := t.outcome; calls == 0 && !paused && o != nil && o.evaluating == nil && resp.StopReason != "refusal" {
		// The agent's turn is over: its outcome is evaluated before the session idles (outcome.go).
		evs = append(evs, o.evaluationStart())
	} else if calls == 0 && !paused {
		reason := apitype.StopEndTurn
		if resp.StopReason == "refusal" {
			reason = apitype.StopRefusal
		}
		evs = append(evs, t.collectOutputs()...)
		evs = append(evs, idleEvent(apitype.StopReason{Type: reason}))
		// The turn is over: with nothing else waiting, the same write hands the session back.
		p.Status, p.Release = apitype.StatusIdle, t.tail.settled()
	}
	if tp := t.traceParent(); tp != "" {
		// The calls a client or a self-hosted worker answers carry the turn's trace to them.
		for i := range evs {
			if evs[i].Type == apitype.EventAgentToolUse || evs[i].Type == apitype.EventAgentCustomToolUse {
				evs[i].Data = apitype.WithTraceParent(evs[i].Data, tp)
			}
		}
	}
	p.Events = evs
	out, err := t.appendP(p)
	if err != nil {
		return err
	}
	for _, e := range out {
		if e.Type != apitype.EventAgentToolUse && e.Type != apitype.EventAgentMCPToolUse {
			continue
		}
		var u apitype.AgentToolUse
		if err := e.DecodeData(&u); err == nil && u.EvaluatedPermission == apitype.PermissionAllow {
			t.fresh[e.ID] = true
		}
	}
	return nil
}
