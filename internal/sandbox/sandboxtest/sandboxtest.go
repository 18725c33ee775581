// Package sandboxtest is the conformance suite every sandbox backend passes (Run), the red-team suite every
// isolating backend passes (RunRedTeam), and the suites for resource limits (RunLimits), egress networking
// (RunNetwork), what a sandbox must not get from its host (RunHardening: inherited descriptors, system calls
// beyond the seccomp deny list, host paths in its mount table), the disk and inode quotas of its workspace and
// /tmp (RunQuota), and that sandboxes die with a SIGKILLed server and leave nothing behind (RunCrash). A
// backend's test builds the agent once (BuildAgent, in TestMain), decides whether its tool is present (Require)
// and calls the suites with a constructor for its Provider.
package sandboxtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/corralhq/corral/internal/sandbox"
)

// RequireEnv lists the backends (comma-separated) whose suites must run: a missing tool fails them instead of
// skipping. CI sets it.
const RequireEnv = "CORRAL_REQUIRE_SANDBOXES"

// Require skips the test when unavailable is non-nil, or fails it when RequireEnv names backend.
func Require(tb testing.TB, backend string, unavailable error) {
	tb.Helper()
	if unavailable == nil {
		return
	}
	if slices.Contains(strings.Split(os.Getenv(RequireEnv), ","), backend) {
		tb.Fatalf("%s backend required by %s but unavailable: %v", backend, RequireEnv, unavailable)
	}
	tb.Skipf("%s backend unavailable: %v", backend, unavailable)
}

// BuildAgent builds cmd/corral-sandbox-agent statically into dir (which it makes searchable by every uid, as
// sandboxes bind it from there) and returns the binary's path.
func BuildAgent(dir string) (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("sandboxtest: cannot locate the source tree")
	}
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	out := filepath.Join(dir, "corral-sandbox-agent")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./cmd/corral-sandbox-agent")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("sandboxtest: build agent: %v: %s", err, b)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	return out, nil
}

// Options tune the suites to what a backend offers.
type Options struct {
	// NotIsolated marks a backend without isolation (process): the isolation checks are skipped and paths are
	// host paths.
	NotIsolated bool
	// NoHostProcesses marks a backend whose sandboxed processes are not host processes (gVisor): the test that
	// kills a sandbox's processes from the host is skipped.
	NoHostProcesses bool
	// Remote marks a backend whose sandboxes run on other machines with workspaces of their own (kubernetes):
	// the session's resources are not placed in them (the Pool reports them as not placed), so the checks of
	// the session's mounts are skipped, saying so.
	Remote bool
	// EphemeralWorkspace marks a backend whose workspace goes with its sandbox (kubernetes without a workspace
	// class): the next sandbox of the session starts with an empty one.
	EphemeralWorkspace bool
	// PidsLimit is the process limit the backend enforces in place of the recipe's, when it cannot take one
	// per sandbox (kubernetes: the node's per-pod limit); zero: the recipe's.
	PidsLimit int
}

// WorkspaceRoot returns a new directory for workspaces whose ancestors sandbox uids can search.
func WorkspaceRoot(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// newPool returns a Pool over a new provider, stopped at the end of the test.
func newPool(t *testing.T, newProvider func(testing.TB) sandbox.Provider, idle time.Duration) *sandbox.Pool {
	t.Helper()
	p, _ := newPoolRoot(t, newProvider, idle)
	return p
}

// newPoolRoot is newPool that also returns the pool's workspace root.
func newPoolRoot(t *testing.T, newProvider func(testing.TB) sandbox.Provider, idle time.Duration) (*sandbox.Pool, string) {
	t.Helper()
	return newPoolWith(t, newProvider(t), idle)
}

// newPoolWith is newPoolRoot over the provider prov.
func newPoolWith(t *testing.T, prov sandbox.Provider, idle time.Duration) (*sandbox.Pool, string) {
	t.Helper()
	root := WorkspaceRoot(t)
	p, err := sandbox.NewPool(sandbox.PoolConfig{Provider: prov, WorkspaceRoot: root, IdleTimeout: idle})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return p, root
}

// call is a tool call for a session.
func call(session, tool string, input any) *sandbox.Call {
	b, err := json.Marshal(input)
	if err != nil {
		panic(err)
	}
	return &sandbox.Call{Recipe: sandbox.Recipe{SessionID: session}, Name: tool, Input: b}
}

// mustRun runs a call that must succeed and returns its text.
func mustRun(t *testing.T, h sandbox.Hands, c *sandbox.Call) string {
	t.Helper()
	res, err := h.Execute(context.Background(), c)
	if err != nil {
		t.Fatalf("%s %s: %v", c.Name, c.Input, err)
	}
	if res.IsError {
		t.Fatalf("%s %s: error result: %s", c.Name, c.Input, res.Text())
	}
	return res.Text()
}

// mustFail runs a call that must give an error result and returns its text.
func mustFail(t *testing.T, h sandbox.Hands, c *sandbox.Call) string {
	t.Helper()
	res, err := h.Execute(context.Background(), c)
	if err != nil {
		t.Fatalf("%s %s: %v", c.Name, c.Input, err)
	}
	if !res.IsError {
		t.Fatalf("%s %s: want an error result, got: %s", c.Name, c.Input, res.Text())
	}
	return res.Text()
}

func bash(session, command string) *sandbox.Call {
	return call(session, "bash", map[string]any{"command": command})
}

// provision provisions a sandbox directly from the provider, with its workspace at ws, closed at the end of
// the test.
func provision(t *testing.T, p sandbox.Provider, ws string, r sandbox.Recipe) sandbox.Sandbox {
	t.Helper()
	if r.SessionID == "" {
		r.SessionID = filepath.Base(ws)
	}
	if err := os.MkdirAll(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	sb, err := p.Provision(context.Background(), &r, sandbox.HostDirs{Workspace: ws})
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	return sb
}

func exec1(t *testing.T, sb sandbox.Sandbox, tool string, input any) (sandbox.Result, error) {
	t.Helper()
	b, _ := json.Marshal(input)
	return sb.Execute(context.Background(), "", tool, b)
}

// Main is a backend test's TestMain: it builds the agent into a temporary directory, sets *agentPath, runs the
// tests, and fails them if goroutines are left behind.
func Main(m *testing.M, agentPath *string) {
	dir, err := os.MkdirTemp("", "corral-agent-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*agentPath, err = BuildAgent(dir)
	agentDir = dir
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "leaked goroutines:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// crashChildEnv, set by RunCrash in the environment of the server process it starts, names the file that child
// reports to: it makes RunCrash in the child provision sandboxes and wait to be killed.
const crashChildEnv = "CORRAL_SANDBOXTEST_CRASH_CHILD"

// crashChildReport is the file a crash child reports to, or "" in the test process itself.
func crashChildReport() string { return os.Getenv(crashChildEnv) }

// crashChildEnviron is the environment of a crash child that reports to report: this test's own, which holds
// what the backends' tests read (CORRAL_RUNSC, RequireEnv).
func crashChildEnviron(report string) []string { return append(os.Environ(), crashChildEnv+"="+report) }
