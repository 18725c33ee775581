package apitype

import (
	"encoding/json"
	"fmt"
	"time"
)

// Multi-agent event types (§3.3).
const (
	EventSessionThreadCreated           EventType = "session.thread_created"
	EventSessionThreadStatusRunning     EventType = "session.thread_status_running"
	EventSessionThreadStatusIdle        EventType = "session.thread_status_idle"
	EventSessionThreadStatusRescheduled EventType = "session.thread_status_rescheduled"
	EventSessionThreadStatusTerminated  EventType = "session.thread_status_terminated"
	EventAgentThreadMessageSent         EventType = "agent.thread_message_sent"
	EventAgentThreadMessageReceived     EventType = "agent.thread_message_received"
)

// ThreadAgentType is the type of a thread's agent (SessionThread.agent.type).
type ThreadAgentType string

// Thread agent types.
const (
	ThreadAgentAgent   ThreadAgentType = "agent"   // a roster agent, or the session's own ("self")
	ThreadAgentAdvisor ThreadAgentType = "advisor" // the advisor: only a model
	ThreadAgentInline  ThreadAgentType = "inline"  // an agent the coordinator defined when it started the thread
)

// ThreadAgent is the resolved agent of a thread, and a roster entry of a session's multiagent snapshot: a full
// agent snapshot (no multiagent: depth is 1). An inline agent has no id or version; the advisor has only a model.
type ThreadAgent struct {
	Type              ThreadAgentType    `json:"type"`
	ID                string             `json:"id,omitempty"`
	Version           int                `json:"version,omitempty"`
	Name              string             `json:"name,omitempty"`
	Description       string             `json:"description"`
	System            string             `json:"system"`
	Model             ModelConfig        `json:"model"`
	Tools             []Tool             `json:"tools"`
	MCPServers        []MCPServer        `json:"mcp_servers"`
	Skills            []SkillRef         `json:"skills"`
	ExecutionIdentity *ExecutionIdentity `json:"execution_identity,omitempty"`
}

// ThreadStats are a thread's timings; nil until its first status change.
type ThreadStats struct {
	ActiveSeconds   float64 `json:"active_seconds"`
	DurationSeconds float64 `json:"duration_seconds"`
	StartupSeconds  float64 `json:"startup_seconds"`
}

// SessionThread is «SessionThread»: one context of a multi-agent session's conversation. The primary thread has
// no parent; a child is started by its parent's start_thread call.
type SessionThread struct {
	Type           ObjectType    `json:"type"` // "session_thread"
	ID             string        `json:"id"`
	SessionID      string        `json:"session_id"`
	ParentThreadID *string       `json:"parent_thread_id"`
	Status         string        `json:"status"`
	WorkflowRunID  *string       `json:"workflow_run_id"`
	Agent          ThreadAgent   `json:"agent"`
	Stats          *ThreadStats  `json:"stats"`
	Usage          *SessionUsage `json:"usage"`
	CreatedAt      time.Time     `json:"created_at"`
	UpdatedAt      time.Time     `json:"updated_at"`
	ArchivedAt     *time.Time    `json:"archived_at"`
}

// Primary reports whether t is its session's primary thread.
func (t *SessionThread) Primary() bool { return t.ParentThreadID == nil }

// ThreadCreated is the payload of session.thread_created.
type ThreadCreated struct {
	SessionThreadID string  `json:"session_thread_id"`
	AgentName       string  `json:"agent_name"`
	WorkflowRunID   *string `json:"workflow_run_id"`
}

// ThreadStatus is the payload of session.thread_status_*: StopReason and StopDetails only on _idle.
type ThreadStatus struct {
	SessionThreadID string          `json:"session_thread_id"`
	AgentName       string          `json:"agent_name"`
	StopReason      *StopReason     `json:"stop_reason,omitempty"`
	StopDetails     json.RawMessage `json:"stop_details,omitempty"`
}

// ThreadMessageSent is the payload of agent.thread_message_sent. ToAgentName is absent for a message to the
// primary thread.
type ThreadMessageSent struct {
	ToSessionThreadID string         `json:"to_session_thread_id"`
	ToAgentName       *string        `json:"to_agent_name,omitempty"`
	Content           []ContentBlock `json:"content"`
}

// ThreadMessageReceived is the payload of agent.thread_message_received: an input of the receiving thread,
// appended unprocessed and marked processed when its model takes it, as a client's message is.
type ThreadMessageReceived struct {
	FromSessionThreadID string         `json:"from_session_thread_id"`
	FromAgentName       *string        `json:"from_agent_name,omitempty"`
	Content             []ContentBlock `json:"content"`
}

// Roster is what a multi-agent session's threads may start, read from its agent snapshot's multiagent (either
// form): the predefined agents (full snapshots; "self" is the session's own agent, listed with its id), whether
// "self" and inline agents may be started, and the advisor's model.
type Roster struct {
	Agents  []ThreadAgent
	Self    bool
	Inline  bool
	Advisor string // "" when the advisor is disabled
}

// Find returns the roster agent named name (or with that id), nil if none.
func (r *Roster) Find(name string) *ThreadAgent {
	for i := range r.Agents {
		if r.Agents[i].Name == name || r.Agents[i].ID == name {
			return &r.Agents[i]
		}
	}
	return nil
}

// ParseRoster reads a session snapshot's multiagent: nil for a single-agent session (absent or null). selfID is
// the session agent's id: a roster entry with it (how the API snapshots "self"), or of type "self", makes Self
// true. For multiagent_20261001 the roster is the subagents member (predefined_agents, inline_agents); the
// workflows member's agents are not in it.
func ParseRoster(raw json.RawMessage, selfID string) (*Roster, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var m struct {
		Type    string            `json:"type"`
		Agents  []json.RawMessage `json:"agents"`
		Advisor *struct {
			Type  string `json:"type"`
			Model any    `json:"model"`
		} `json:"advisor"`
		Subagents *struct {
			Type             string            `json:"type"`
			PredefinedAgents []json.RawMessage `json:"predefined_agents"`
			Inline           *struct {
				Type string `json:"type"`
			} `json:"inline_agents"`
		} `json:"subagents"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("multiagent: %w", err)
	}
	r := &Roster{}
	add := func(entries []json.RawMessage) error {
		for _, e := range entries {
			var head struct {
				Type  string `json:"type"`
				Model any    `json:"model"`
			}
			if err := json.Unmarshal(e, &head); err != nil {
				return fmt.Errorf("multiagent roster: %w", err)
			}
			switch head.Type {
			case "self":
				r.Self = true
				continue
			case "advisor":
				r.Advisor = modelName(head.Model)
				continue
			}
			var a ThreadAgent
			if err := json.Unmarshal(e, &a); err != nil {
				return fmt.Errorf("multiagent roster: %w", err)
			}
			if a.ID == selfID && selfID != "" {
				r.Self = true
			}
			r.Agents = append(r.Agents, a)
		}
		return nil
	}
	switch m.Type {
	case "coordinator":
		if err := add(m.Agents); err != nil {
			return nil, err
		}
	case "multiagent_20261001":
		if m.Advisor != nil && m.Advisor.Type == "enabled" {
			r.Advisor = modelName(m.Advisor.Model)
		}
		if s := m.Subagents; s == nil || s.Type != "disabled" {
			r.Inline = s == nil || s.Inline == nil || s.Inline.Type != "disabled"
			if s != nil {
				if err := add(s.PredefinedAgents); err != nil {
					return nil, err
				}
			}
		}
	default:
		return nil, fmt.Errorf("multiagent: unknown type %q", m.Type)
	}
	return r, nil
}

// modelName reads a model given as a string or as a model object ({"id": ...}).
func modelName(v any) string {
	switch m := v.(type) {
	case string:
		return m
	case map[string]any:
		s, _ := m["id"].(string)
		return s
	}
	return ""
}
