package server_test

import (
	"encoding/json"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/server"
)

// TestFailureSources runs the observability turn (an overloaded model answer from the fake model over HTTP,
// retried; a bash call whose sandbox fails to provision; a final answer) and reads the log as a client does:
// the session.error says the model failed (anthropic, overloaded), the provisioning span and the tool result
// say the hands failed (the stub backend, provision_failed).
func TestFailureSources(t *testing.T) {
	t.Parallel()
	srv, _, sessID := observed(t, func(*server.Config) {})
	do(t, srv, "POST", "/v1/sessions/"+sessID+"/events", map[string]any{"events": []any{map[string]any{
		"type": "user.message", "content": []any{map[string]any{"type": "text", "text": "Run it."}}}}}, nil)
	waitIdle(t, srv, sessID)
	var page struct {
		Data []struct {
			Type   apitype.EventType      `json:"type"`
			Error  json.RawMessage        `json:"error"` // an object in session.error, a string in span ends
			Source *apitype.FailureSource `json:"source"`
		}
	}
	do(t, srv, "GET", "/v1/sessions/"+sessID+"/events?limit=1000", nil, &page)
	want := map[apitype.EventType]apitype.FailureSource{
		apitype.EventSessionError:            {Component: apitype.ComponentModel, Backend: "anthropic", Reason: apitype.ReasonOverloaded},
		apitype.EventSpanSandboxProvisionEnd: {Component: apitype.ComponentHands, Backend: "stub", Reason: apitype.ReasonProvisionFailed},
		apitype.EventAgentToolResult:         {Component: apitype.ComponentHands, Backend: "stub", Reason: apitype.ReasonProvisionFailed},
	}
	seen := map[apitype.EventType]bool{}
	for _, e := range page.Data {
		w, ok := want[e.Type]
		if !ok {
			continue
		}
		seen[e.Type] = true
		src := e.Source
		if e.Type == apitype.EventSessionError {
			var body apitype.SessionErrorBody
			if err := json.Unmarshal(e.Error, &body); err != nil {
				t.Fatal(err)
			}
			src = body.Source
		}
		if src == nil || *src != w {
			t.Errorf("%s source = %+v, want %+v", e.Type, src, w)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("events with a source: %v, want %d kinds", seen, len(want))
	}
}
