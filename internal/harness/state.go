package harness

import (
	"encoding/json"
	"slices"

	"github.com/corralhq/corral/internal/apitype"
)

// toolUse is a tool call of the tail (an agent.tool_use, agent.custom_tool_use or agent.mcp_tool_use), with what
// the log says about it since.
type toolUse struct {
	ev apitype.Event
	// data holds the call's shared fields; an MCP call's name is its tool's name at the server.
	data      apitype.AgentToolUse
	kind      execKind                   // who runs it: the kind of the route it was made under (useEvents)
	server    string                     // an MCP call: the agent's MCP server
	resolved  bool                       // a result is in the log
	confirmed apitype.ConfirmationResult // allow | deny, from a processed user.tool_confirmation
}

// exec is the executor of the call.
func (u *toolUse) exec() executor { return exec(u.kind) }

// approved reports whether the call may run: its policy allowed it, or the user confirmed it.
func (u *toolUse) approved() bool {
	return u.exec().gated() && (u.data.EvaluatedPermission == apitype.PermissionAllow || u.confirmed == apitype.ConfirmAllow)
}

// refused reports whether the call was refused before any policy (an unknown or disabled tool).
func (u *toolUse) refused() bool {
	return u.exec().gated() && u.data.EvaluatedPermission == apitype.PermissionDeny
}

// closeResult is the error (or plain) result that closes the call without running it, as its executor writes it.
func (u *toolUse) closeResult(isErr bool, text string) apitype.NewEvent {
	return u.exec().close(u, isErr, nil, text)
}

// closeFailed is the error result of a call that failed in src's part of Corral.
func (u *toolUse) closeFailed(src *apitype.FailureSource, text string) apitype.NewEvent {
	return u.exec().close(u, true, src, text)
}

// state is what a brain derives from the tail to decide its next step.
type state struct {
	status      apitype.EventType    // type of the last session.status_* event, "" if none
	idle        *apitype.SessionIdle // its payload when status is session.status_idle
	openSpan    *apitype.Event       // a span.model_request_start without its end (a crash mid-call)
	uses        []*toolUse
	byID        map[string]*toolUse
	unprocessed []apitype.Event // client events not yet processed, in order
	// lastSide is the side of the conversation's last content: "user" (a message or a tool result the model
	// has not answered yet) or "assistant".
	lastSide string
	builtin  execKind // the kind of the session's built-in calls
	multi    bool     // a thread of a multi-agent session: its thread tools are the brain's (coordinate.go)
	// budget is the budget the tail's last session.updated naming one set (null: removed), if budgetSet.
	budget    json.RawMessage
	budgetSet bool
	// outcome is the session's active outcome (outcome.go), nil when none.
	outcome *outcome
}

// paused reports whether the session idled at its budget.
func (s *state) paused() bool {
	return s.idle != nil && s.idle.StopReason.Type == apitype.StopBudgetReached
}

// terminated reports whether the session is over (archived, or ended for good): nothing more runs in it.
func (s *state) terminated() bool { return s.status == apitype.EventSessionStatusTerminated }

// running reports whether a turn is in progress.
func (s *state) running() bool {
	return s.status == apitype.EventSessionStatusRunning || s.status == apitype.EventSessionStatusRescheduled
}

// open returns the tool uses that have no result yet.
func (s *state) open() []*toolUse {
	var out []*toolUse
	for _, u := range s.uses {
		if !u.resolved {
			out = append(out, u)
		}
	}
	return out
}

// unprocessedOf returns the unprocessed client events of the given types.
func (s *state) unprocessedOf(types ...apitype.EventType) []apitype.Event {
	var out []apitype.Event
	for _, e := range s.unprocessed {
		if slices.Contains(types, e.Type) {
			out = append(out, e)
		}
	}
	return out
}

// derive reads the thread's state out of its tail.
func (t *thread) derive() (*state, error) { return derive(t.tail, t.builtin()) }

// derive reads the state out of the tail; builtin is the kind of the session's built-in calls (run.builtin). Each
// event type has its reading in derivers.
func derive(t *tail, builtin execKind) (*state, error) {
	s := &state{status: t.priorStatus, byID: map[string]*toolUse{}, builtin: builtin, multi: t.multi}
	for _, e := range t.priorOutcome {
		// An outcome outlives the compaction of the events that define and evaluate it.
		if err := derivers[e.Type](s, e); err != nil {
			return nil, err
		}
	}
	s.lastSide = ""
	if t.summary != "" {
		s.lastSide = "user"
	}
	for _, e := range t.events {
		if isInput(e.Type) && e.ProcessedAt == nil {
			s.unprocessed = append(s.unprocessed, e)
		}
		e.Type = t.statusType(e.Type)
		if d := derivers[e.Type]; d != nil {
			if err := d(s, e); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// derivers read each event type that matters to the state into it.
var derivers = map[apitype.EventType]func(*state, apitype.Event) error{
	apitype.EventSessionStatusRunning:       deriveStatus,
	apitype.EventSessionStatusRescheduled:   deriveStatus,
	apitype.EventSessionStatusTerminated:    deriveStatus,
	apitype.EventSessionStatusIdle:          deriveIdle,
	apitype.EventSpanModelRequestStart:      func(s *state, e apitype.Event) error { s.openSpan = &e; return nil },
	apitype.EventSpanModelRequestEnd:        func(s *state, _ apitype.Event) error { s.openSpan = nil; return nil },
	apitype.EventAgentMessage:               deriveSide("assistant"),
	apitype.EventAgentThinking:              deriveSide("assistant"),
	apitype.EventAgentToolUse:               deriveUse,
	apitype.EventAgentCustomToolUse:         deriveUse,
	apitype.EventAgentMCPToolUse:            deriveUse,
	apitype.EventAgentToolResult:            deriveResult,
	apitype.EventAgentMCPToolResult:         deriveResult,
	apitype.EventUserToolResult:             deriveResult,
	apitype.EventUserCustomToolResult:       deriveResult,
	apitype.EventUserToolConfirmation:       deriveConfirmation,
	apitype.EventUserMessage:                deriveMessage,
	apitype.EventSystemMessage:              deriveMessage,
	apitype.EventAgentThreadMessageReceived: deriveMessage,
	apitype.EventSessionUpdated:             deriveBudget,
	apitype.EventUserDefineOutcome:          deriveDefineOutcome,
	apitype.EventSpanOutcomeEvaluationStart: deriveEvaluationStart,
	apitype.EventSpanOutcomeEvaluationEnd:   deriveEvaluationEnd,
}

// deriveBudget reads the budget a session.updated changed, if it names one ("budget": null removed it).
func deriveBudget(s *state, e apitype.Event) error {
	var upd map[string]json.RawMessage
	if err := e.DecodeData(&upd); err != nil {
		return err
	}
	if b, ok := upd["budget"]; ok {
		s.budget, s.budgetSet = b, true
	}
	return nil
}

func deriveStatus(s *state, e apitype.Event) error {
	s.status, s.idle = e.Type, nil
	return nil
}

func deriveIdle(s *state, e apitype.Event) error {
	var idle apitype.SessionIdle
	if err := e.DecodeData(&idle); err != nil {
		return err
	}
	s.status, s.idle = e.Type, &idle
	return nil
}

func deriveSide(side string) func(*state, apitype.Event) error {
	return func(s *state, _ apitype.Event) error {
		s.lastSide = side
		return nil
	}
}

// deriveUse adds a tool call, of the kind its event type says (the session's built-in kind for an agent.tool_use).
func deriveUse(s *state, e apitype.Event) error {
	ue := useEvents[e.Type]
	d, err := ue.read(e)
	if err != nil {
		return err
	}
	u := &toolUse{ev: e, data: d.data, kind: ue.kind, server: d.server}
	switch {
	case ue.builtin && s.multi && isThreadTool(d.data.Name):
		u.kind = execAgents
	case ue.builtin && d.data.Name == toolWebFetch:
		u.kind = execWeb
	case ue.builtin && d.data.Name == toolWebSearch:
		u.kind = execSearch
	case ue.builtin:
		u.kind = s.builtin
	}
	s.uses = append(s.uses, u)
	s.byID[e.ID] = u
	s.lastSide = "assistant"
	return nil
}

// deriveResult resolves the call a result answers. The agent's own results answer any call; a client's only the
// calls its executor says it answers (answeredBy).
func deriveResult(s *state, e apitype.Event) error {
	r, err := resultEvents[e.Type](e)
	if err != nil {
		return err
	}
	u := s.byID[r.useID]
	if !apitype.IsUserEvent(e.Type) {
		if u != nil {
			u.resolved = true
		}
		s.lastSide = "user"
		return nil
	}
	if u != nil && u.exec().answeredBy() == e.Type {
		u.resolved = true
		s.lastSide = "user"
	}
	return nil
}

// deriveConfirmation records the first processed confirmation of a call.
func deriveConfirmation(s *state, e apitype.Event) error {
	if e.ProcessedAt == nil {
		return nil
	}
	var c apitype.UserToolConfirmation
	if err := e.DecodeData(&c); err != nil {
		return err
	}
	if u := s.byID[c.ToolUseID]; u != nil && u.confirmed == "" {
		u.confirmed = c.Result
	}
	return nil
}

// deriveMessage: a client message the model has picked up is the conversation's last content.
func deriveMessage(s *state, e apitype.Event) error {
	if e.ProcessedAt != nil {
		s.lastSide = "user"
	}
	return nil
}
