package harness

import (
	"slices"

	"github.com/corralhq/corral/internal/apitype"
)

// toolUse is an agent.tool_use or agent.custom_tool_use of the tail, with what the log says about it since.
type toolUse struct {
	ev        apitype.Event
	data      apitype.AgentToolUse
	custom    bool
	mcp       *apitype.AgentMCPToolUse   // an agent.mcp_tool_use (data holds its shared fields too)
	resolved  bool                       // a result is in the log
	confirmed apitype.ConfirmationResult // allow | deny, from a processed user.tool_confirmation
}

// approved reports whether the call may run: its policy allowed it, or the user confirmed it.
func (u *toolUse) approved() bool {
	return !u.custom && (u.data.EvaluatedPermission == apitype.PermissionAllow || u.confirmed == apitype.ConfirmAllow)
}

// refused reports whether the call was refused before any policy (an unknown or disabled tool).
func (u *toolUse) refused() bool {
	return !u.custom && u.data.EvaluatedPermission == apitype.PermissionDeny
}

// state is what a brain derives from the tail to decide its next step.
type state struct {
	status      string               // type of the last session.status_* event, "" if none
	idle        *apitype.SessionIdle // its payload when status is session.status_idle
	openSpan    *apitype.Event       // a span.model_request_start without its end (a crash mid-call)
	uses        []*toolUse
	byID        map[string]*toolUse
	unprocessed []apitype.Event // client events not yet processed, in order
	// lastSide is the side of the conversation's last content: "user" (a message or a tool result the model
	// has not answered yet) or "assistant".
	lastSide string
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
func (s *state) unprocessedOf(types ...string) []apitype.Event {
	var out []apitype.Event
	for _, e := range s.unprocessed {
		if slices.Contains(types, e.Type) {
			out = append(out, e)
		}
	}
	return out
}

// derive reads the state out of the tail.
func derive(t *tail) (*state, error) {
	s := &state{status: t.priorStatus, byID: map[string]*toolUse{}}
	if t.summary != "" {
		s.lastSide = "user"
	}
	for _, e := range t.events {
		if apitype.IsUserEvent(e.Type) && e.ProcessedAt == nil {
			s.unprocessed = append(s.unprocessed, e)
		}
		switch e.Type {
		case apitype.EventSessionStatusRunning, apitype.EventSessionStatusRescheduled:
			s.status, s.idle = e.Type, nil
		case apitype.EventSessionStatusTerminated:
			s.status, s.idle = e.Type, nil
		case apitype.EventSessionStatusIdle:
			var idle apitype.SessionIdle
			if err := e.DecodeData(&idle); err != nil {
				return nil, err
			}
			s.status, s.idle = e.Type, &idle
		case apitype.EventSpanModelRequestStart:
			ev := e
			s.openSpan = &ev
		case apitype.EventSpanModelRequestEnd:
			s.openSpan = nil
		case apitype.EventAgentMessage, apitype.EventAgentThinking:
			s.lastSide = "assistant"
		case apitype.EventAgentToolUse, apitype.EventAgentCustomToolUse:
			u := &toolUse{ev: e, custom: e.Type == apitype.EventAgentCustomToolUse}
			if err := e.DecodeData(&u.data); err != nil {
				return nil, err
			}
			s.uses = append(s.uses, u)
			s.byID[e.ID] = u
			s.lastSide = "assistant"
		case apitype.EventAgentMCPToolUse:
			u := &toolUse{ev: e, mcp: &apitype.AgentMCPToolUse{}}
			if err := e.DecodeData(u.mcp); err != nil {
				return nil, err
			}
			u.data = apitype.AgentToolUse{Name: u.mcp.Name, Input: u.mcp.Input, EvaluatedPermission: u.mcp.EvaluatedPermission}
			s.uses = append(s.uses, u)
			s.byID[e.ID] = u
			s.lastSide = "assistant"
		case apitype.EventAgentMCPToolResult:
			var r apitype.AgentMCPToolResult
			if err := e.DecodeData(&r); err != nil {
				return nil, err
			}
			if u := s.byID[r.MCPToolUseID]; u != nil {
				u.resolved = true
			}
			s.lastSide = "user"
		case apitype.EventAgentToolResult:
			var r apitype.AgentToolResult
			if err := e.DecodeData(&r); err != nil {
				return nil, err
			}
			if u := s.byID[r.ToolUseID]; u != nil {
				u.resolved = true
			}
			s.lastSide = "user"
		case apitype.EventUserCustomToolResult:
			var r apitype.UserCustomToolResult
			if err := e.DecodeData(&r); err != nil {
				return nil, err
			}
			if u := s.byID[r.CustomToolUseID]; u != nil && u.custom {
				u.resolved = true
				s.lastSide = "user"
			}
		case apitype.EventUserToolResult:
			var r apitype.UserToolResult
			if err := e.DecodeData(&r); err != nil {
				return nil, err
			}
			if u := s.byID[r.ToolUseID]; u != nil && !u.custom {
				u.resolved = true
				s.lastSide = "user"
			}
		case apitype.EventUserToolConfirmation:
			if e.ProcessedAt == nil {
				continue
			}
			var c apitype.UserToolConfirmation
			if err := e.DecodeData(&c); err != nil {
				return nil, err
			}
			if u := s.byID[c.ToolUseID]; u != nil && u.confirmed == "" {
				u.confirmed = c.Result
			}
		case apitype.EventUserMessage, apitype.EventSystemMessage:
			if e.ProcessedAt != nil {
				s.lastSide = "user"
			}
		}
	}
	return s, nil
}
