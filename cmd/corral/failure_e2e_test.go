package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/client"
	"github.com/corralhq/corral/internal/model/modeltest"
)

// TestHandsFailureSources runs `corral serve --sandbox bwrap` with small limits and has the fake model's bash
// calls fail in the hands three ways, one session each: a command past its timeout, a sandbox past its memory
// limit, and a sandbox killed from the host mid-call. Each tool result says which part failed, in which
// backend, and why (its source), as a client reads it from the log.
func TestHandsFailureSources(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	model := modeltest.NewServer(t)
	s := startServer(t, t.TempDir(), model, "--sandbox", "bwrap", "--sandbox-memory", "64", "--log-format", "json")
	c := s.client()
	ctx := context.Background()
	agent, err := c.AgentCreate(ctx, &client.AgentCreateParams{Name: "hands", Model: apitype.ModelConfig{ID: "claude-sonnet-4-5"},
		Tools: []apitype.Tool{{Type: apitype.ToolTypeAgentToolset}}})
	if err != nil {
		t.Fatal(err)
	}
	env, err := c.EnvironmentCreate(ctx, &client.EnvironmentCreateParams{Name: "hands", Config: apitype.EnvConfig{Type: "cloud"}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	defer func() { assertSessionLines(t, s.stderr.String(), ids) }()
	marker := fmt.Sprintf("corral-kill-me-%d", time.Now().UnixNano())
	// Only the timeout case has a short timeout: the others must end by their own cause however slow the
	// machine is (a loaded CI machine once took more than 3 s to fill 64 MiB from a pipe).
	for _, tc := range []struct {
		name, command string
		timeoutMS     int
		reason        apitype.FailureReason
		during        func(t *testing.T)
	}{
		{"timeout", `sleep 30`, 3000, apitype.ReasonTimeout, nil},
		{"memory", `x=$(head -c 400000000 /dev/zero | tr '\0' a); echo ${#x}`, 120_000, apitype.ReasonLimitHit, nil},
		{"killed", fmt.Sprintf("(exec -a %s sleep 1000) >/dev/null 2>&1 & sleep 110", marker), 120_000, apitype.ReasonSandboxDied,
			func(t *testing.T) { killAgentOf(t, marker) }},
	} {
		input, _ := json.Marshal(map[string]any{"command": tc.command, "timeout_ms": tc.timeoutMS})
		model.Script(
			modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: string(input)}}},
			modeltest.Turn{Text: "Noted."},
		)
		sess, err := c.SessionCreate(ctx, &client.SessionCreateParams{Agent: client.AgentRef{ID: agent.ID}, EnvironmentID: env.ID,
			InitialEvents: []apitype.NewEvent{client.UserMessage("Run it.")}})
		if err != nil {
			t.Fatal(err)
		}
		id := sess.ID
		ids = append(ids, id)
		if tc.during != nil {
			tc.during(t)
		}
		events := waitIdle(t, c, id)
		var res map[string]any
		for _, e := range events {
			if e["type"] == "agent.tool_result" {
				res = e
			}
		}
		if res == nil {
			t.Fatalf("%s: no tool result in %v", tc.name, types(events))
		}
		b, _ := json.Marshal(res["source"])
		var src apitype.FailureSource
		_ = json.Unmarshal(b, &src)
		want := apitype.FailureSource{Component: apitype.ComponentHands, Backend: "bwrap", Reason: tc.reason}
		if res["is_error"] != true || src != want {
			content, _ := json.Marshal(res["content"])
			t.Errorf("%s: tool result is_error %v source %s, want %+v; content %s", tc.name, res["is_error"], b, want, content)
		}
	}
}

// assertSessionLines checks the server's JSON log: every line that mentions one of the sessions carries its
// id under "session", and some do.
func assertSessionLines(t *testing.T, log string, ids []string) {
	t.Helper()
	about := 0
	for line := range strings.SplitSeq(log, "\n") {
		if !strings.HasPrefix(line, "{") {
			continue // the plain lines corral prints at start (listening on, key files)
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("log line is not JSON: %v: %s", err, line)
			continue
		}
		for _, id := range ids {
			if strings.Contains(line, id) {
				about++
				if rec["session"] != id {
					t.Errorf("a line mentions %s but does not carry it as session: %s", id, line)
				}
			}
		}
	}
	if about == 0 && len(ids) > 0 {
		t.Errorf("no log line about the sessions %v", ids)
	}
}

// killAgentOf waits for the process named marker in a sandbox, then kills it and its ancestors up to (not
// including) the corral server: the sandbox dies mid-call, as when the kernel or an operator kills it.
func killAgentOf(t *testing.T, marker string) {
	t.Helper()
	corral := filepath.Join(binDir, "corral")
	deadline := time.Now().Add(20 * time.Second)
	pid := 0
	for pid == 0 && time.Now().Before(deadline) {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			var p int
			if _, err := fmt.Sscan(e.Name(), &p); err != nil {
				continue
			}
			if b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); strings.HasPrefix(string(b), marker+"\x00") {
				pid = p
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if pid == 0 {
		t.Fatalf("no process %s appeared", marker)
	}
	var chain []int
	for p := pid; p > 1; p = ppid(p) {
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", p)); exe == corral {
			break
		}
		chain = append(chain, p)
	}
	for _, p := range chain {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

// ppid is the parent of pid (0 if unknown).
func ppid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	var p int
	if len(fields) > 1 {
		_, _ = fmt.Sscan(fields[1], &p)
	}
	return p
}
