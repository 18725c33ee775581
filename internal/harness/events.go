package harness

import (
	"cmp"
	"encoding/json"

	"github.com/corralhq/corral/internal/apitype"
)

// Tool result texts the model sees.
const (
	msgInterrupted    = "interrupted by the user"
	msgOutcomeUnknown = "The brain running this tool call stopped before it reported a result, so its outcome is unknown: it may have run partly, fully or not at all. Check its effects before running it again."
	msgNoHands        = "no sandbox is configured on this server, so built-in tools cannot run"
)

func mustEvent(typ apitype.EventType, payload any) apitype.NewEvent {
	ev, err := apitype.MakeEvent(typ, payload)
	if err != nil {
		panic(err) // every payload here is a struct of this package's choosing: it always encodes
	}
	return ev
}

func toolResult(toolUseID string, isErr bool, text string) apitype.NewEvent {
	return mustEvent(apitype.EventAgentToolResult, apitype.AgentToolResult{
		ToolUseID: toolUseID, IsError: isErr, Content: []apitype.ContentBlock{apitype.TextBlock(text)},
	})
}

// failedResult is the error agent.tool_result of a call that failed in src's part (nil: the tool's own error).
func failedResult(toolUseID string, src *apitype.FailureSource, text string) apitype.NewEvent {
	return mustEvent(apitype.EventAgentToolResult, apitype.AgentToolResult{
		ToolUseID: toolUseID, IsError: true, Content: []apitype.ContentBlock{apitype.TextBlock(text)}, Source: src,
	})
}

func spanEnd(startID string, isErr bool, u apitype.SpanUsage) apitype.NewEvent {
	return mustEvent(apitype.EventSpanModelRequestEnd, apitype.SpanModelRequestEnd{
		ModelRequestStartID: startID, IsError: isErr, ModelUsage: u,
	})
}

func idleEvent(reason apitype.StopReason) apitype.NewEvent {
	p := apitype.SessionIdle{StopReason: reason, StopDetails: json.RawMessage("null")}
	if reason.Type == apitype.StopRefusal {
		p.StopDetails = json.RawMessage(`{"type":"refusal","category":null,"explanation":null}`)
	}
	return mustEvent(apitype.EventSessionStatusIdle, p)
}

// useData is what a tool use event says, whatever its type.
type useData struct {
	data      apitype.AgentToolUse // an MCP call's name is its tool's name at the server
	server    string               // an MCP call's server
	modelName string               // the name the model called the tool by
}

// useEvents reads each type of tool use event, and says which executor kind its calls have (builtin: the
// session's kind of built-in calls, the hands' or the work queue's).
var useEvents = map[apitype.EventType]struct {
	kind    execKind
	builtin bool
	read    func(apitype.Event) (useData, error)
}{
	apitype.EventAgentToolUse:       {kind: execHands, builtin: true, read: readToolUse},
	apitype.EventAgentCustomToolUse: {kind: execClient, read: readToolUse},
	apitype.EventAgentMCPToolUse:    {kind: execMCP, read: readMCPToolUse},
}

func readToolUse(e apitype.Event) (useData, error) {
	var u apitype.AgentToolUse
	if err := e.DecodeData(&u); err != nil {
		return useData{}, err
	}
	return useData{data: u, modelName: u.Name}, nil
}

func readMCPToolUse(e apitype.Event) (useData, error) {
	var u apitype.AgentMCPToolUse
	if err := e.DecodeData(&u); err != nil {
		return useData{}, err
	}
	return useData{
		data: apitype.AgentToolUse{Name: u.Name, Input: u.Input, EvaluatedPermission: u.EvaluatedPermission,
			ModelToolUseID: u.ModelToolUseID},
		server: u.MCPServerName, modelName: cmp.Or(u.ModelToolName, u.Name),
	}, nil
}

// resultData is what a tool result event says, whatever its type.
type resultData struct {
	useID   string // the event id of the call it answers
	content []apitype.ContentBlock
	isErr   bool
}

// resultEvents reads each type of tool result event: the agent's own (agent.tool_result, agent.mcp_tool_result)
// and the client's (user.tool_result, user.custom_tool_result).
var resultEvents = map[apitype.EventType]func(apitype.Event) (resultData, error){
	apitype.EventAgentToolResult: readResult(func(r *apitype.AgentToolResult) resultData {
		return resultData{r.ToolUseID, r.Content, r.IsError}
	}),
	apitype.EventAgentMCPToolResult: readResult(func(r *apitype.AgentMCPToolResult) resultData {
		return resultData{r.MCPToolUseID, r.Content, r.IsError}
	}),
	apitype.EventUserToolResult: readResult(func(r *apitype.UserToolResult) resultData {
		return resultData{r.ToolUseID, r.Content, r.IsError}
	}),
	apitype.EventUserCustomToolResult: readResult(func(r *apitype.UserCustomToolResult) resultData {
		return resultData{r.CustomToolUseID, r.Content, r.IsError}
	}),
}

func readResult[T any](get func(*T) resultData) func(apitype.Event) (resultData, error) {
	return func(e apitype.Event) (resultData, error) {
		var v T
		if err := e.DecodeData(&v); err != nil {
			return resultData{}, err
		}
		return get(&v), nil
	}
}
