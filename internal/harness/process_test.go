package harness_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/process"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
)

// processPool is a Pool over the process backend, with the sandbox agent built for it, stopped at the test's end.
func processPool(t *testing.T) *sandbox.Pool {
	t.Helper()
	agentPath, err := sandboxtest.BuildAgent(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	provider, err := process.New(process.Config{AgentPath: agentPath, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	pool, err := sandbox.NewPool(sandbox.PoolConfig{Provider: provider, WorkspaceRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Stop() })
	return pool
}

// TestProcessSandbox runs built-in tools in real hands: the Pool over the process backend, provisioned lazily on
// the first tool call.
func TestProcessSandbox(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the sandbox agent")
	}
	t.Parallel()
	pool := processPool(t)

	f := newFixture(t)
	f.srv.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{ID: "toolu_w", Name: "write", Input: `{"file_path":"notes/hello.txt","content":"hello from the model\n"}`}}},
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{ID: "toolu_r", Name: "bash", Input: `{"command":"cat notes/hello.txt"}`}}},
		modeltest.Turn{Text: "The file says hello."},
	)
	cfg := f.config()
	cfg.Hands = pool
	f.start(cfg)
	id := f.session(toolset)
	f.say(id, "write a note and read it back")

	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, userMsg, running, start, toolUse, end, usage,
		apitype.EventSpanSandboxProvisionStart, apitype.EventSpanSandboxProvisionEnd, toolResult,
		start, toolUse, end, usage, toolResult, start, agentMsg, end, usage, idle)
	if pe := decode[apitype.SandboxProvisionEnd](t, evs[7]); pe.Backend != "process" || pe.IsError || pe.ProvisionStartID != evs[6].ID {
		t.Errorf("provision end = %+v", pe)
	}
	if res := decode[apitype.AgentToolResult](t, evs[8]); res.IsError {
		t.Errorf("write = %+v", res)
	}
	res := decode[apitype.AgentToolResult](t, evs[13])
	if res.IsError || strings.TrimSpace(resultText(res)) != "hello from the model" {
		t.Errorf("bash = %+v", res)
	}
	if tr := lastToolResult(t, f.srv.Requests()[2]); tr.ToolUseID != "toolu_r" || strings.TrimSpace(blockText(tr)) != "hello from the model" {
		t.Errorf("model saw %+v", tr)
	}
}

// TestBashExitIsNotAFailure: a command that exits non-zero is the tool's answer, not a failure of Corral: the
// model gets the exit code in the result (an error result, no failure source), no session.error is appended,
// and the turn ends as any other.
func TestBashExitIsNotAFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the sandbox agent")
	}
	t.Parallel()
	pool := processPool(t)

	f := newFixture(t)
	f.srv.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{ID: "toolu_x", Name: "bash", Input: `{"command":"echo checking; exit 3"}`}}},
		modeltest.Turn{Text: "The check failed with code 3."},
	)
	cfg := f.config()
	cfg.Hands = pool
	f.start(cfg)
	id := f.session(toolset)
	f.say(id, "run the check")

	evs := f.waitIdle(id, 1)
	var results int
	for _, e := range evs {
		switch e.Type {
		case toolResult:
			results++
			res := decode[apitype.AgentToolResult](t, e)
			if !res.IsError || res.Source != nil || !strings.Contains(resultText(res), "checking") || !strings.Contains(resultText(res), "exit code: 3") {
				t.Errorf("bash result = %+v, want an error result with the output and the exit code, and no failure source", res)
			}
		case sessErr:
			t.Errorf("a non-zero exit appended a session.error: %s", e.Data)
		}
	}
	if results != 1 {
		t.Fatalf("%d tool results; log %v", results, types(evs))
	}
	assertStop(t, evs[len(evs)-1], apitype.StopEndTurn)
	if tr := lastToolResult(t, f.srv.Requests()[1]); tr.ToolUseID != "toolu_x" || !strings.Contains(blockText(tr), "exit code: 3") {
		t.Errorf("model saw %+v", tr)
	}
}
