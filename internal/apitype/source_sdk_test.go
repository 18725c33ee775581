package apitype_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/corralhq/corral/internal/apitype"
)

// TestFailureSourceDecodesWithSDK: the events that carry Corral's failure source (session.error, a failed
// agent.tool_result) and a client event carrying its traceparent still decode with the official SDK's session
// event union, as the variants they are, with the extra fields only in ExtraFields.
func TestFailureSourceDecodesWithSDK(t *testing.T) {
	src := &apitype.FailureSource{Component: apitype.ComponentHands, Backend: "bwrap", Reason: apitype.ReasonSandboxDied}
	mk := func(typ apitype.EventType, payload any) []byte {
		t.Helper()
		ev, err := apitype.MakeEvent(typ, payload)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		b, err := json.Marshal(apitype.Event{ID: "sevt_1", Type: typ, ProcessedAt: &now,
			Data: apitype.WithTraceParent(ev.Data, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	var u anthropic.BetaManagedAgentsSessionEventUnion
	if err := json.Unmarshal(mk(apitype.EventSessionError, apitype.SessionError{Error: apitype.SessionErrorBody{
		Type: apitype.SessionErrUnknown, Message: "the sandbox died", RetryStatus: apitype.RetryStatus{Type: apitype.RetryStatusRetrying}, Source: src}}), &u); err != nil {
		t.Fatal(err)
	}
	se := u.AsSessionError()
	if se.Type != "session.error" || se.Error.Type != string(apitype.SessionErrUnknown) || se.Error.Message != "the sandbox died" || se.Error.RetryStatus.Type != "retrying" {
		t.Errorf("SDK decoded the session.error as %+v", se)
	}
	var raw struct {
		Error struct {
			Source apitype.FailureSource `json:"source"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(se.RawJSON()), &raw); err != nil || raw.Error.Source != *src {
		t.Errorf("source in the SDK's raw JSON = %+v (%v), want %+v", raw.Error.Source, err, *src)
	}

	if err := json.Unmarshal(mk(apitype.EventAgentToolResult, apitype.AgentToolResult{ToolUseID: "sevt_0", IsError: true,
		Content: []apitype.ContentBlock{apitype.TextBlock("died")}, Source: src}), &u); err != nil {
		t.Fatal(err)
	}
	if tr := u.AsAgentToolResult(); tr.Type != "agent.tool_result" || tr.ToolUseID != "sevt_0" || !tr.IsError {
		t.Errorf("SDK decoded the tool result as %+v", tr)
	}

	if err := json.Unmarshal(mk(apitype.EventUserMessage, apitype.UserMessage{Content: []apitype.ContentBlock{apitype.TextBlock("hi")}}), &u); err != nil {
		t.Fatal(err)
	}
	if m := u.AsUserMessage(); m.Type != "user.message" || len(m.Content) != 1 || m.Content[0].Text != "hi" {
		t.Errorf("SDK decoded the traced user.message as %+v", m)
	}
}

// TestTraceParentField: WithTraceParent adds the field to an object (empty or not) and leaves other data alone;
// TraceParent reads it back.
func TestTraceParentField(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, data := range []string{`{}`, `{"content":[]}`, ` { "a" : 1 } `} {
		got := apitype.WithTraceParent(json.RawMessage(data), tp)
		if !json.Valid(got) || (apitype.Event{Data: got}).TraceParent() != tp {
			t.Errorf("WithTraceParent(%s) = %s", data, got)
		}
	}
	for _, data := range []string{``, `null`, `[1]`} {
		if got := apitype.WithTraceParent(json.RawMessage(data), tp); string(got) != data {
			t.Errorf("WithTraceParent(%q) = %q, want it unchanged", data, got)
		}
	}
	if got := apitype.WithTraceParent(json.RawMessage(`{"a":1}`), ""); string(got) != `{"a":1}` {
		t.Errorf("WithTraceParent without a traceparent changed the data: %s", got)
	}
	if (apitype.Event{Data: json.RawMessage(`{"a":1}`)}).TraceParent() != "" {
		t.Error("TraceParent of data without one is not empty")
	}
}
