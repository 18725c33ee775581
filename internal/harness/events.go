package harness

import (
	"encoding/json"

	"github.com/corralhq/corral/internal/apitype"
)

// Tool result texts the model sees.
const (
	msgInterrupted    = "interrupted by the user"
	msgOutcomeUnknown = "The brain running this tool call stopped before it reported a result, so its outcome is unknown: it may have run partly, fully or not at all. Check its effects before running it again."
	msgNoHands        = "no sandbox is configured on this server, so built-in tools cannot run"
)

func mustEvent(typ string, payload any) apitype.NewEvent {
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
