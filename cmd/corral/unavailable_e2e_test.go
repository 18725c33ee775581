package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/model/modeltest"
)

// TestServeUnavailableSandbox: a backend that cannot run here leaves serve running, and a built-in tool call
// gets an error result that says why (the reason the log has), not "no sandbox is configured".
func TestServeUnavailableSandbox(t *testing.T) {
	t.Parallel()
	model := modeltest.NewServer(t)
	model.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"true"}`}}},
		modeltest.Turn{Text: "No sandbox."},
	)
	s := startServer(t, t.TempDir(), model, "--sandbox", "gvisor", "--runsc", "/nonexistent/runsc")
	c := s.client()
	events := waitIdle(t, c, newSession(t, c, "Run true."))
	const reason = "runsc (gVisor) is not installed: /nonexistent/runsc not found"
	var result string
	for _, e := range events {
		if e["type"] == "agent.tool_result" {
			b, _ := json.Marshal(e["content"])
			result = string(b)
			if e["is_error"] != true {
				t.Errorf("tool result is not an error: %s", b)
			}
		}
	}
	if !strings.Contains(result, reason) || strings.Contains(result, "no sandbox is configured") {
		t.Errorf("tool result = %s, want the reason %q", result, reason)
	}
	if !strings.Contains(s.stderr.String(), reason) {
		t.Errorf("the server log lacks the reason %q:\n%s", reason, s.stderr.String())
	}
	if n := count(events, "agent.message"); n != 1 {
		t.Errorf("%d agent messages after the failed tool call, want 1: %v", n, types(events))
	}
}
