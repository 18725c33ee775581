package bwrap_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/bwrap"
	"github.com/corralhq/corral/internal/sandbox/cgroup"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
)

// TestWarmStart: a start kept ready is a root process with an empty environment, parked in groups of its own.
// A sandbox started from it runs in those groups renamed for the sandbox, under the sandbox's limits, bwrap
// included, as the sandbox's uid; another start is made ready once that start is over. A parked process killed
// is logged and replaced, and a sandbox asked for meanwhile still starts (cold: none is ready). Close leaves no parked
// process and no group.
func TestWarmStart(t *testing.T) {
	if err := cgroup.Available(cgroup.DefaultRoot); err != nil {
		sandboxtest.Require(t, "cgroup v1", err)
	}
	// The log is a file: the warmer logs from its own goroutine.
	logs, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	p := newProviderWith(t, bwrap.Config{AgentPath: agentPath, Warm: 1, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	ctx := context.Background()

	parked, group := waitParked(t, 0)
	if env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", parked)); err != nil || len(env) != 0 {
		t.Errorf("parked process's environment = %q (%v), want empty", env, err)
	}
	if uid := procUID(t, parked); uid != 0 {
		t.Errorf("parked process runs as uid %d, want root until it is told", uid)
	}

	limits := sandbox.Limits{MemoryBytes: 300 << 20, Pids: 77}
	sb, err := p.Provision(ctx, &sandbox.Recipe{SessionID: "sesn_warm", Limits: limits}, sandbox.HostDirs{Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	// The parked process is now bwrap, in the same groups, which carry the sandbox's name and limits.
	name := groupOf(t, parked, "memory")
	if !strings.HasPrefix(name, "bwrap-") || strings.HasPrefix(name, "bwrap-warm-") || name == group {
		t.Fatalf("bwrap runs in group %q, want the sandbox's (the parked one was %q)", name, group)
	}
	if comm := procField(t, parked, "Name"); comm != "bwrap" {
		t.Errorf("the parked process became %q, want bwrap", comm)
	}
	if uid := procUID(t, parked); uid == 0 {
		t.Error("bwrap runs as root")
	}
	for file, want := range map[string]string{
		filepath.Join(corralGroups(t, "memory"), name, "memory.limit_in_bytes"): strconv.Itoa(300 << 20),
		filepath.Join(corralGroups(t, "pids"), name, "pids.max"):                "77",
	} {
		if b, err := os.ReadFile(file); err != nil || strings.TrimSpace(string(b)) != want {
			t.Errorf("%s = %q (%v), want %s", file, b, err, want)
		}
	}
	// The agent, bwrap's child, was born there, and so is what it runs.
	out := run(t, sb, "echo $$; sleep 30 & echo $!")
	if procs := groupProcs(t, "pids", name); len(procs) < 3 || !slices.Contains(procs, parked) {
		t.Errorf("sandbox's group holds %v (output %q), want bwrap (%d), the agent and the shell's processes", procs, out, parked)
	}
	for _, c := range []string{"pids", "cpu"} {
		if got := groupOf(t, parked, c); got != name {
			t.Errorf("bwrap's %s group is %q, want %q", c, got, name)
		}
	}
	// Its network namespace is the one the parked process was born in, kept by bwrap: the agent and its shell
	// are in it, not in the host's, and its loopback is up (a connection is refused, not unreachable).
	hostNet := netNS(t, os.Getpid())
	sandboxNet := netNS(t, parked)
	if sandboxNet == hostNet {
		t.Errorf("the sandbox runs in the host's network namespace %s", hostNet)
	}
	for _, pid := range groupProcs(t, "pids", name) {
		if ns := netNS(t, pid); ns != sandboxNet {
			t.Errorf("process %d of the sandbox is in network namespace %s, bwrap in %s", pid, ns, sandboxNet)
		}
	}
	if got := run(t, sb, "exec 3<>/dev/tcp/127.0.0.1/1 2>&1; true"); !strings.Contains(got, "Connection refused") {
		t.Errorf("a connection to the sandbox's loopback: %q, want it refused", got)
	}

	// The next start is ready without a sandbox asking for it.
	next, nextGroup := waitParked(t, parked)
	// Killed while parked, it is replaced; the sandbox asked for meanwhile starts cold.
	if err := syscall.Kill(next, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, next)
	sb2, err := p.Provision(ctx, &sandbox.Recipe{SessionID: "sesn_cold"}, sandbox.HostDirs{Workspace: t.TempDir()})
	if err != nil {
		t.Fatalf("Provision after the parked process was killed: %v", err)
	}
	if got := run(t, sb2, "echo ok"); strings.TrimSpace(got) != "ok" {
		t.Errorf("cold sandbox answered %q", got)
	}
	// Found dead when taken; or, if the exit was reaped but not yet told when the sandbox asked, found when it
	// could not be told anything.
	if log, _ := os.ReadFile(logs.Name()); !strings.Contains(string(log), "a start kept ready had exited") &&
		!strings.Contains(string(log), "it starts cold") {
		t.Errorf("the log does not say the start kept ready was dead:\n%s", log)
	}
	if ns := strings.TrimSpace(run(t, sb2, "readlink /proc/self/ns/net")); ns == hostNet || ns == sandboxNet {
		t.Errorf("the cold sandbox's network namespace %s is the host's (%s) or the first sandbox's (%s)", ns, hostNet, sandboxNet)
	}
	third, thirdGroup := waitParked(t, next)

	for _, s := range []sandbox.Sandbox{sb, sb2} {
		if err := s.Close(); err != nil {
			t.Errorf("Close sandbox: %v", err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	waitGone(t, third)
	for _, c := range []string{"memory", "pids", "cpu"} {
		for _, g := range []string{name, nextGroup, thirdGroup} {
			if _, err := os.Stat(filepath.Join(corralGroups(t, c), g)); !os.IsNotExist(err) {
				t.Errorf("group %s/%s left after Close (%v)", c, g, err)
			}
		}
	}
	if g := groupOf(t, os.Getpid(), "memory"); strings.HasPrefix(g, "bwrap-") {
		t.Errorf("the test process is in a sandbox's group %q", g)
	}
}

// TestWarmStartOldAgent: an agent binary without the spawn mode (an older release beside a newer server) keeps
// no start ready, which would never become bwrap: the provider says so in its log and starts every sandbox cold.
func TestWarmStartOldAgent(t *testing.T) {
	old := filepath.Join(t.TempDir(), "old-agent")
	if err := os.WriteFile(old, []byte("#!/bin/sh\nexec cat >/dev/null\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	p := newProviderWith(t, bwrap.Config{AgentPath: old, Warm: 1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if bwrap.KeepsStartsReady(p) {
		t.Error("an agent without the spawn mode keeps starts ready")
	}
	if !strings.Contains(logs.String(), "cannot keep starts ready") {
		t.Errorf("the log does not say why no start is kept ready:\n%s", logs.String())
	}
	if real := newProviderWith(t, bwrap.Config{AgentPath: agentPath, Warm: 1}); !bwrap.KeepsStartsReady(real) {
		t.Error("the agent built from this tree keeps no start ready")
	}
}

// TestWarmStartUnclaimed: a ready start that cannot be claimed (its pipe broken, as when its process dies
// between take and claim) is discarded, its process and groups with it, and the sandbox starts cold; the log
// says so, and another start is made ready.
func TestWarmStartUnclaimed(t *testing.T) {
	if err := cgroup.Available(cgroup.DefaultRoot); err != nil {
		sandboxtest.Require(t, "cgroup v1", err)
	}
	// The log is a file: the warmer logs from its own goroutine.
	logs, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	p := newProviderWith(t, bwrap.Config{AgentPath: agentPath, Warm: 1, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	parked, group := waitParked(t, 0)
	if n := bwrap.BreakStartsReady(p); n != 1 {
		t.Fatalf("broke %d starts, want the one ready", n)
	}
	sb, err := p.Provision(context.Background(), &sandbox.Recipe{SessionID: "sesn_unclaimed"}, sandbox.HostDirs{Workspace: t.TempDir()})
	if err != nil {
		t.Fatalf("Provision with a start that cannot be claimed: %v", err)
	}
	defer sb.Close()
	if got := run(t, sb, "echo ok"); strings.TrimSpace(got) != "ok" {
		t.Errorf("the sandbox answered %q", got)
	}
	if log, _ := os.ReadFile(logs.Name()); !strings.Contains(string(log), "it starts cold") {
		t.Errorf("the log does not say the sandbox started cold:\n%s", log)
	}
	waitGone(t, parked)
	for _, c := range []string{"memory", "pids", "cpu"} {
		if _, err := os.Stat(filepath.Join(corralGroups(t, c), group)); !os.IsNotExist(err) {
			t.Errorf("the discarded start's group %s/%s is left (%v)", c, group, err)
		}
	}
	waitParked(t, parked)
}

// TestColdStart runs the conformance and limits suites with no start kept ready: every sandbox starts cold,
// moved into its groups while bwrap waits (TestConformance and TestLimits mostly start warm).
func TestColdStart(t *testing.T) {
	cold := func(t testing.TB) sandbox.Provider {
		return newProviderWith(t, bwrap.Config{AgentPath: agentPath, Warm: -1})
	}
	t.Run("Conformance", func(t *testing.T) { sandboxtest.Run(t, cold, sandboxtest.Options{}) })
	t.Run("Limits", func(t *testing.T) { sandboxtest.RunLimits(t, cold, sandboxtest.Options{}) })
}

func run(t *testing.T, sb sandbox.Sandbox, command string) string {
	t.Helper()
	input, _ := json.Marshal(map[string]string{"command": command})
	res, err := sb.Execute(context.Background(), "", "bash", input)
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError {
		t.Fatalf("%s: %+v", command, res.Content)
	}
	var b strings.Builder
	for _, c := range res.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

// corralGroups is the directory of a controller where the provider makes its groups: <own group>/corral.
func corralGroups(t *testing.T, controller string) string {
	t.Helper()
	return filepath.Join(cgroup.DefaultRoot, controller, ownGroup(t, os.Getpid(), controller), "corral")
}

// ownGroup is pid's group path of a controller, from /proc/<pid>/cgroup.
func ownGroup(t *testing.T, pid int, controller string) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), controller) {
			return parts[2]
		}
	}
	t.Fatalf("no %s group for pid %d", controller, pid)
	return ""
}

// groupOf is the name of pid's group of a controller.
func groupOf(t *testing.T, pid int, controller string) string {
	t.Helper()
	return filepath.Base(ownGroup(t, pid, controller))
}

func groupProcs(t *testing.T, controller, name string) []int {
	t.Helper()
	return cgroup.ProcsIn(filepath.Join(corralGroups(t, controller), name))
}

// waitParked waits for a parked process of this test's provider (a child of this process, in a bwrap-warm-
// group) other than not, and returns its pid and group.
func waitParked(t *testing.T, not int) (int, string) {
	t.Helper()
	dir := corralGroups(t, "pids")
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), "bwrap-warm-") {
				continue
			}
			for _, pid := range groupProcs(t, "pids", e.Name()) {
				if pid != not && procField(t, pid, "PPid") == strconv.Itoa(os.Getpid()) {
					return pid, e.Name()
				}
			}
		}
	}
	t.Fatal("no start kept ready within 20s")
	return 0, ""
}

// waitGone waits until pid has exited and been reaped.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		// Reaped, not only a zombie: a Go program's other threads still hold its descriptors then.
		if procField(t, pid, "State") == "" {
			return
		}
	}
	t.Fatalf("process %d still runs", pid)
}

// procField is a field of /proc/<pid>/status ("" once the process is gone).
func procField(t *testing.T, pid int, field string) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// netNS names pid's network namespace.
func netNS(t *testing.T, pid int) string {
	t.Helper()
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

func procUID(t *testing.T, pid int) int {
	t.Helper()
	f := strings.Fields(procField(t, pid, "Uid"))
	if len(f) == 0 {
		t.Fatalf("no uid for %d", pid)
	}
	n, _ := strconv.Atoi(f[0])
	return n
}
