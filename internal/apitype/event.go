package apitype

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Session event types.
const (
	EventUserMessage          EventType = "user.message"
	EventUserInterrupt        EventType = "user.interrupt"
	EventUserToolConfirmation EventType = "user.tool_confirmation"
	EventUserCustomToolResult EventType = "user.custom_tool_result"
	EventUserToolResult       EventType = "user.tool_result"
	EventUserDefineOutcome    EventType = "user.define_outcome"
	EventSystemMessage        EventType = "system.message"

	EventAgentMessage          EventType = "agent.message"
	EventAgentThinking         EventType = "agent.thinking"
	EventAgentToolUse          EventType = "agent.tool_use"
	EventAgentToolResult       EventType = "agent.tool_result"
	EventAgentMCPToolUse       EventType = "agent.mcp_tool_use"
	EventAgentMCPToolResult    EventType = "agent.mcp_tool_result"
	EventAgentCustomToolUse    EventType = "agent.custom_tool_use"
	EventAgentContextCompacted EventType = "agent.thread_context_compacted"

	EventSessionStatusRunning     EventType = "session.status_running"
	EventSessionStatusIdle        EventType = "session.status_idle"
	EventSessionStatusRescheduled EventType = "session.status_rescheduled"
	EventSessionStatusTerminated  EventType = "session.status_terminated"
	EventSessionError             EventType = "session.error"
	EventSessionDeleted           EventType = "session.deleted"
	EventSessionUpdated           EventType = "session.updated"
	EventSessionUsage             EventType = "session.usage"

	EventSpanModelRequestStart EventType = "span.model_request_start"
	EventSpanModelRequestEnd   EventType = "span.model_request_end"

	EventSpanOutcomeEvaluationStart   EventType = "span.outcome_evaluation_start"
	EventSpanOutcomeEvaluationOngoing EventType = "span.outcome_evaluation_ongoing"
	EventSpanOutcomeEvaluationEnd     EventType = "span.outcome_evaluation_end"

	// Corral's own spans: where the hands' time and failures went.
	EventSpanSandboxProvisionStart EventType = "span.sandbox_provision_start"
	EventSpanSandboxProvisionEnd   EventType = "span.sandbox_provision_end"
)

// IsUserEvent reports whether t is an event a client sends (and a brain must act on).
func IsUserEvent(t EventType) bool {
	switch t {
	case EventUserMessage, EventUserInterrupt, EventUserToolConfirmation, EventUserCustomToolResult,
		EventUserToolResult, EventUserDefineOutcome, EventSystemMessage:
		return true
	}
	return false
}

// Event is one entry of a session's log. Data holds the type-specific fields as a JSON object; on the wire
// they sit beside id, type and processed_at.
type Event struct {
	ID          string
	Type        EventType
	SessionID   string
	Seq         int64      // per-session, contiguous from 1
	CreatedAt   time.Time  // when it was appended
	ProcessedAt *time.Time // nil until a brain has processed a client event
	Data        json.RawMessage
	// Thread is the session thread whose event it is: "" for the primary thread (and every event of a
	// single-agent session), a child's sthr_ id otherwise. It is not on the wire: an event a child's stream shows
	// on the primary's carries session_thread_id in its data.
	Thread string
	// CrossPost: a child's event that the session's stream (the primary's condensed view) shows too.
	CrossPost bool
}

// MarshalJSON writes the event as one flat object: {"id","type","processed_at",...Data}.
func (e Event) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"id":`)
	writeJSONString(&b, e.ID)
	b.WriteString(`,"type":`)
	writeJSONString(&b, string(e.Type))
	b.WriteString(`,"processed_at":`)
	if e.ProcessedAt != nil {
		writeJSONString(&b, e.ProcessedAt.UTC().Format(TimeFormat))
	} else {
		b.WriteString("null")
	}
	data := bytes.TrimSpace(e.Data)
	if len(data) > 2 && data[0] == '{' {
		inner := bytes.TrimSpace(data[1 : len(data)-1])
		if len(inner) > 0 {
			b.WriteByte(',')
			b.Write(inner)
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func writeJSONString(b *bytes.Buffer, s string) {
	out, _ := json.Marshal(s) // a string always marshals.
	b.Write(out)
}

// DecodeData decodes the event's type-specific fields into v.
func (e Event) DecodeData(v any) error {
	if len(e.Data) == 0 {
		return nil
	}
	if err := json.Unmarshal(e.Data, v); err != nil {
		return fmt.Errorf("decode %s event %s: %w", e.Type, e.ID, err)
	}
	return nil
}

// NewEvent is an event to append: its type and its type-specific fields. The store assigns seq and times, and
// the id unless ID is set.
type NewEvent struct {
	// ID, if set, is the id the event is stored under (it must have PrefixEvent, and no other event may have
	// it): a brain names an answer's events before it appends them, so that stream previews can carry the id.
	ID   string
	Type EventType
	Data json.RawMessage
	// Processed marks a server event processed at append (every event a brain writes). Client events are
	// appended unprocessed and marked when a brain takes them.
	Processed bool
	// Thread is the thread the event belongs to ("" the primary); CrossPost shows a child's event on the
	// session's stream too (see Event).
	Thread    string
	CrossPost bool
}

// MakeEvent builds a NewEvent from a payload struct.
func MakeEvent(typ EventType, payload any) (NewEvent, error) {
	if payload == nil {
		return NewEvent{Type: typ, Data: json.RawMessage("{}"), Processed: !IsUserEvent(typ)}, nil
	}
	data, err := json.Marshal(payload)
	if err != nil {
		return NewEvent{}, fmt.Errorf("encode %s: %w", typ, err)
	}
	if len(data) == 0 || data[0] != '{' {
		return NewEvent{}, errors.New("event payload must be a JSON object")
	}
	return NewEvent{Type: typ, Data: data, Processed: !IsUserEvent(typ)}, nil
}

// ContentBlock is one block of message or tool-result content. Type selects which fields are set.
type ContentBlock struct {
	Type      ContentBlockType `json:"type"`
	Text      string           `json:"text,omitempty"`
	Source    json.RawMessage  `json:"source,omitempty"`
	Title     *string          `json:"title,omitempty"`
	Context   *string          `json:"context,omitempty"`
	Content   json.RawMessage  `json:"content,omitempty"`
	Citations json.RawMessage  `json:"citations,omitempty"`
}

// TextBlock is a text content block.
func TextBlock(s string) ContentBlock { return ContentBlock{Type: ContentText, Text: s} }

// ImageSource is the source of an image or document block.
type ImageSource struct {
	Type      SourceType `json:"type"`
	MediaType string     `json:"media_type,omitempty"`
	Data      string     `json:"data,omitempty"`
	URL       string     `json:"url,omitempty"`
	FileID    string     `json:"file_id,omitempty"`
}

// Payloads of the events a brain reads and writes.

// UserMessage is the payload of user.message (and system.message).
type UserMessage struct {
	Content []ContentBlock `json:"content"`
}

// UserInterrupt is the payload of user.interrupt.
type UserInterrupt struct {
	SessionThreadID string `json:"session_thread_id,omitempty"`
}

// UserToolConfirmation is the payload of user.tool_confirmation.
type UserToolConfirmation struct {
	ToolUseID   string             `json:"tool_use_id"`
	Result      ConfirmationResult `json:"result"`
	DenyMessage string             `json:"deny_message,omitempty"`
}

// UserCustomToolResult is the payload of user.custom_tool_result.
type UserCustomToolResult struct {
	CustomToolUseID string         `json:"custom_tool_use_id"`
	Content         []ContentBlock `json:"content,omitempty"`
	IsError         bool           `json:"is_error,omitempty"`
}

// UserToolResult is the payload of user.tool_result (self-hosted environments).
type UserToolResult struct {
	ToolUseID string         `json:"tool_use_id"`
	Content   []ContentBlock `json:"content,omitempty"`
	IsError   bool           `json:"is_error,omitempty"`
	// Source is set by the brain on the result it writes for a call a vanished worker may have run.
	Source *FailureSource `json:"source,omitempty"`
}

// AgentMessage is the payload of agent.message.
type AgentMessage struct {
	Content []ContentBlock `json:"content"`
}

// AgentThinking is the payload of agent.thinking. The hosted service sends no content; Corral keeps the
// thinking text and its signature (extra fields, which clients ignore) so that a resumed turn can pass them back
// to the model exactly.
type AgentThinking struct {
	Thinking  string `json:"thinking,omitempty"`
	Signature string `json:"signature,omitempty"`
	Redacted  string `json:"redacted_data,omitempty"`
}

// AgentToolUse is the payload of agent.tool_use and agent.custom_tool_use.
type AgentToolUse struct {
	Name                string          `json:"name"`
	Input               json.RawMessage `json:"input"`
	EvaluatedPermission Permission      `json:"evaluated_permission,omitempty"`
	Evaluation          *ToolEvaluation `json:"evaluation,omitempty"`
	// ModelToolUseID is the id the model gave the call; kept so history replays exactly.
	ModelToolUseID string `json:"model_tool_use_id,omitempty"`
	// ServerBlock is a call the model provider ran itself (Anthropic's web search server tool): its
	// server_tool_use block as the provider sent it, replayed as is (Corral's field).
	ServerBlock json.RawMessage `json:"server_block,omitempty"`
}

// AgentMCPToolUse is the payload of agent.mcp_tool_use: a call to a tool of an agent's MCP server.
type AgentMCPToolUse struct {
	MCPServerName       string          `json:"mcp_server_name"`
	Name                string          `json:"name"` // the tool's name on the server
	Input               json.RawMessage `json:"input"`
	EvaluatedPermission Permission      `json:"evaluated_permission,omitempty"`
	Evaluation          *ToolEvaluation `json:"evaluation,omitempty"`
	// ModelToolUseID and ModelToolName are the id the model gave the call and the tool name it was offered;
	// kept so history replays exactly.
	ModelToolUseID string `json:"model_tool_use_id,omitempty"`
	ModelToolName  string `json:"model_tool_name,omitempty"`
}

// AgentMCPToolResult is the payload of agent.mcp_tool_result.
type AgentMCPToolResult struct {
	MCPToolUseID string         `json:"mcp_tool_use_id"`
	Content      []ContentBlock `json:"content,omitempty"`
	IsError      bool           `json:"is_error"`
	// Source, on an error result, says which part of Corral failed (not set when the tool reported the error).
	Source *FailureSource `json:"source,omitempty"`
}

// ToolEvaluation names the policy that produced evaluated_permission.
type ToolEvaluation struct {
	Type PermissionPolicyType `json:"type"`
}

// AgentToolResult is the payload of agent.tool_result.
type AgentToolResult struct {
	ToolUseID string         `json:"tool_use_id"`
	Content   []ContentBlock `json:"content,omitempty"`
	IsError   bool           `json:"is_error"`
	// Source, on an error result, says which part of Corral failed (not set when the tool reported the error).
	Source *FailureSource `json:"source,omitempty"`
	// ServerBlock is the result of a call the model provider ran itself: its web_search_tool_result block as
	// the provider sent it, replayed as is (Corral's field); Content then lists the results as text.
	ServerBlock json.RawMessage `json:"server_block,omitempty"`
}

// StopReason says why a session went idle.
type StopReason struct {
	Type     StopReasonType `json:"type"`
	EventIDs []string       `json:"event_ids,omitempty"`
}

// SessionIdle is the payload of session.status_idle.
type SessionIdle struct {
	StopReason  StopReason      `json:"stop_reason"`
	StopDetails json.RawMessage `json:"stop_details"`
}

// SessionError is the payload of session.error.
type SessionError struct {
	Error SessionErrorBody `json:"error"`
}

// SessionErrorBody is the error object of session.error.
type SessionErrorBody struct {
	Type        SessionErrorType `json:"type"`
	Message     string           `json:"message"`
	RetryStatus RetryStatus      `json:"retry_status"`
	// RepositoryURL names the repository of a repository_* error.
	RepositoryURL *string `json:"repository_url,omitempty"`
	// MCPServerName names the server of an mcp_* error.
	MCPServerName string `json:"mcp_server_name,omitempty"`
	// Source says which part of Corral failed (Corral's own field; clients ignore it).
	Source *FailureSource `json:"source,omitempty"`
	// PackageManager and Package name what failed in an environment_build_failed_error (Corral's), when the
	// failure is one package's.
	PackageManager string `json:"package_manager,omitempty"`
	Package        string `json:"package,omitempty"`
}

// FailureSource says which part failed, in which backend, and why: the error.source of a session.error, and
// the source of a failed tool result or provisioning span.
type FailureSource struct {
	Component FailureComponent `json:"component"`
	// Backend is the sandbox backend, the model provider, or the MCP server, where one is known.
	Backend string        `json:"backend,omitempty"`
	Reason  FailureReason `json:"reason"`
}

// RetryStatus says what follows a session error.
type RetryStatus struct {
	Type RetryStatusType `json:"type"`
}

// SpanModelRequestEnd is the payload of span.model_request_end.
type SpanModelRequestEnd struct {
	ModelRequestStartID string    `json:"model_request_start_id"`
	IsError             bool      `json:"is_error"`
	ModelUsage          SpanUsage `json:"model_usage"`
}

// SessionUsageEvent is the payload of session.usage: the session's usage so far and its budget (null when it
// has none), appended with the end of every model request.
type SessionUsageEvent struct {
	Usage  SessionUsage    `json:"usage"`
	Budget json.RawMessage `json:"budget"`
}

// SpanUsage is token usage of one model request.
type SpanUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

// DefineOutcome is the stored payload of user.define_outcome: the API assigns OutcomeID and fills in the default
// MaxIterations. Rubric is {"type":"text","content"} or {"type":"file","file_id"}.
type DefineOutcome struct {
	OutcomeID     string          `json:"outcome_id"`
	Description   string          `json:"description"`
	Rubric        json.RawMessage `json:"rubric"`
	MaxIterations int             `json:"max_iterations"`
}

// OutcomeResult is an outcome evaluation's result: a grader's verdict (satisfied, needs_revision), or how the
// outcome ended otherwise. The session's outcome_evaluations also show the states before a verdict (pending,
// running, evaluating).
type OutcomeResult string

// Outcome results and states.
const (
	OutcomePending              OutcomeResult = "pending"
	OutcomeRunning              OutcomeResult = "running"
	OutcomeEvaluating           OutcomeResult = "evaluating"
	OutcomeSatisfied            OutcomeResult = "satisfied"
	OutcomeNeedsRevision        OutcomeResult = "needs_revision"
	OutcomeMaxIterationsReached OutcomeResult = "max_iterations_reached"
	OutcomeFailed               OutcomeResult = "failed"
	OutcomeInterrupted          OutcomeResult = "interrupted"
)

// OutcomeEvaluationSpan is the payload of span.outcome_evaluation_start and span.outcome_evaluation_ongoing.
type OutcomeEvaluationSpan struct {
	OutcomeID string `json:"outcome_id"`
	Iteration int    `json:"iteration"`
}

// OutcomeEvaluationEnd is the payload of span.outcome_evaluation_end. Usage sums the grader's requests. Criteria
// (Corral's own field) are the grader's verdict per rubric criterion, as it gave them to record_evaluation.
type OutcomeEvaluationEnd struct {
	OutcomeID                string             `json:"outcome_id"`
	OutcomeEvaluationStartID string             `json:"outcome_evaluation_start_id"`
	Iteration                int                `json:"iteration"`
	Result                   OutcomeResult      `json:"result"`
	Explanation              string             `json:"explanation"`
	Usage                    SpanUsage          `json:"usage"`
	Criteria                 []CriterionVerdict `json:"criteria,omitempty"`
}

// CriterionVerdict is the grader's verdict on one rubric criterion.
type CriterionVerdict struct {
	Criterion   string `json:"criterion"`
	Met         bool   `json:"met"`
	Explanation string `json:"explanation"`
}

// OutcomeEvaluation is one entry of a session's outcome_evaluations: an outcome's state, derived from the log.
type OutcomeEvaluation struct {
	Type        ObjectType    `json:"type"`
	OutcomeID   string        `json:"outcome_id"`
	Description string        `json:"description"`
	Iteration   int           `json:"iteration"`
	Result      OutcomeResult `json:"result"`
	Explanation string        `json:"explanation"`
	CompletedAt *time.Time    `json:"completed_at"`
}

// ContextCompacted is the payload of agent.thread_context_compacted. Summary and UpToSeq are Corral's own
// fields: the summary the brain made and the last sequence number it covers.
type ContextCompacted struct {
	Summary string `json:"summary,omitempty"`
	UpToSeq int64  `json:"up_to_seq,omitempty"`
}

// SandboxProvisionEnd is the payload of span.sandbox_provision_end.
type SandboxProvisionEnd struct {
	ProvisionStartID string  `json:"provision_start_id"`
	Backend          string  `json:"backend"`
	IsError          bool    `json:"is_error"`
	Error            string  `json:"error,omitempty"`
	DurationMS       float64 `json:"duration_ms"`
	// Source, on a failed provisioning, says which part failed and why.
	Source *FailureSource `json:"source,omitempty"`
}

// SandboxProvisionStart is the payload of span.sandbox_provision_start.
type SandboxProvisionStart struct {
	Backend string `json:"backend,omitempty"`
	// Image is Corral's own field: the sandbox's image when it is still building as provisioning starts. The
	// provisioning (and the tool call) waits for the build; the base's, on a server's first start, takes
	// minutes. Absent when the image is built.
	Image *EnvironmentImage `json:"image,omitempty"`
}

// TraceParentField is Corral's own field of an event's data that carries the W3C traceparent of the trace the
// event was written in: the API request that sent a client event, the brain's turn that made an agent.tool_use
// or agent.custom_tool_use. The process that acts on the event (a brain, a worker) continues that trace.
const TraceParentField = "traceparent"

// WithTraceParent returns data (a JSON object) with TraceParentField set to tp; data unchanged if tp is "" or
// data is not an object.
func WithTraceParent(data json.RawMessage, tp string) json.RawMessage {
	return WithField(data, TraceParentField, tp)
}

// WithField returns an event's data (a JSON object) with the string field name set to value first; data that is
// not an object, or an empty value, is returned as it is. The field must not be in data already.
func WithField(data json.RawMessage, name, value string) json.RawMessage {
	d := bytes.TrimSpace(data)
	if value == "" || len(d) < 2 || d[0] != '{' {
		return data
	}
	key, _ := json.Marshal(name)    // a string always marshals
	field, _ := json.Marshal(value) // a string always marshals
	var b bytes.Buffer
	b.Grow(len(d) + len(key) + len(field) + 4)
	b.WriteByte('{')
	b.Write(key)
	b.WriteByte(':')
	b.Write(field)
	if inner := bytes.TrimSpace(d[1 : len(d)-1]); len(inner) > 0 {
		b.WriteByte(',')
		b.Write(inner)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// TraceParent is the traceparent the event's data carries (TraceParentField), or "".
func (e Event) TraceParent() string {
	if !bytes.Contains(e.Data, []byte(`"`+TraceParentField+`"`)) {
		return ""
	}
	var v struct {
		TP string `json:"traceparent"`
	}
	if json.Unmarshal(e.Data, &v) != nil {
		return ""
	}
	return v.TP
}
