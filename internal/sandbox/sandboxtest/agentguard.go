package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/sandbox"
)

// guardProbe tries, from inside the sandbox, every way code run by bash could take over a process of the
// sandbox it did not start (the agent, and the sandbox's pid 1 when that is another process): attach with
// ptrace, read its memory, read its environment, and write into its descriptors (where the agent's own pipe
// to the host is). It prints one name=outcome pair per attempt: the errno's name, or "ok" when it worked.
const guardProbe = `
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.ptrace.restype = ctypes.c_long
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
libc.process_vm_readv.restype = ctypes.c_ssize_t
out = []
def res(name, fn):
    try:
        r = fn()
        out.append(name + "=" + ("ok" if r is None or r >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")))
    except OSError as e:
        out.append(name + "=" + errno.errorcode.get(e.errno, "?"))
for pid in sorted({int(a) for a in sys.argv[1:]}):
    p = "pid%d." % pid
    def attach():
        r = libc.ptrace(16, pid, None, None)  # PTRACE_ATTACH
        if r == 0:
            libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
        return r
    def seize():
        r = libc.ptrace(0x4206, pid, None, None)  # PTRACE_SEIZE
        if r == 0:
            libc.ptrace(17, pid, None, None)
        return r
    def vmread():
        buf = ctypes.create_string_buffer(8)
        local = iovec(ctypes.cast(buf, ctypes.c_void_p), 8)
        remote = iovec(0x400000, 8)
        r = libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        if r < 0 and ctypes.get_errno() in (errno.EFAULT, errno.EIO):
            return 0  # the call was allowed; only the address was wrong
        return r
    res(p + "ptrace_attach", attach)
    res(p + "ptrace_seize", seize)
    res(p + "process_vm_readv", vmread)
    res(p + "mem", lambda: os.close(os.open("/proc/%d/mem" % pid, os.O_RDWR)))
    res(p + "environ", lambda: os.close(os.open("/proc/%d/environ" % pid, os.O_RDONLY)))
    for fd in (0, 1, 2):
        res(p + "fd%d" % fd, lambda: os.close(os.open("/proc/%d/fd/%d" % (pid, fd), os.O_WRONLY)))
print(" ".join(out))
`

// GuardOptions describes how a backend guards its agent, for RunAgentGuard.
type GuardOptions struct {
	// ShellNamespace, when set, says why the backend's shells run in a pid namespace of their own (the agent's
	// Config.ShellNamespace) instead of relying on the kernel's protection of a pid namespace's init, which
	// gVisor does not give. There the agent has no pid and no /proc entry: RunAgentGuard checks that the shell
	// sees only its own processes, and that no signal to any pid it can name reaches the agent.
	ShellNamespace string
}

// RunAgentGuard checks that code run by bash cannot take over the in-sandbox agent: it cannot trace it, read
// or write its memory, read its environment, reach its descriptors, or kill or stop it with a signal. Run it
// for every backend that isolates (the process backend's agent is a host process of the server's own uid).
func RunAgentGuard(t *testing.T, newProvider func(testing.TB) sandbox.Provider, opts GuardOptions) {
	p := newPool(t, newProvider, 0)
	const s = "guard"
	mustRun(t, p, bash(s, "export GUARD=kept"))
	agentPID := mustRun(t, p, bash(s, "echo $PPID"))
	t.Logf("the agent is pid %s in its sandbox", agentPID)
	if opts.ShellNamespace != "" {
		t.Logf("the shells run in a pid namespace of their own: %s", opts.ShellNamespace)
	}

	t.Run("Trace", func(t *testing.T) {
		if opts.ShellNamespace != "" {
			// The shell is its namespace's init, its parent (outside) has no pid there, and /proc is the
			// namespace's: no process it lists is the agent, so there is nothing to attach to or open.
			if got := mustRun(t, p, bash(s, "echo $$ $PPID")); got != "1 0" {
				t.Errorf("the shell's pid and parent pid: %q, want %q", got, "1 0")
			}
			got := mustRun(t, p, bash(s, "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' <$f; echo; done"))
			if strings.Contains(got, agentBinPath) {
				t.Errorf("the agent is listed in the shell's /proc: %q", got)
			}
			return
		}
		got := mustRun(t, p, bash(s, "python3 -c '"+guardProbe+"' $PPID 1"))
		t.Logf("probe: %s", got)
		fields := strings.Fields(got)
		if len(fields) == 0 {
			t.Fatalf("the probe printed nothing")
		}
		for _, f := range fields {
			name, outcome, _ := strings.Cut(f, "=")
			// A descriptor the process does not have cannot be reached either.
			isFD := strings.HasSuffix(name, ".fd0") || strings.HasSuffix(name, ".fd1") || strings.HasSuffix(name, ".fd2")
			if outcome != "EPERM" && outcome != "EACCES" && !(isFD && outcome == "ENOENT") {
				t.Errorf("%s: %s, want EPERM or EACCES", name, outcome)
			}
		}
		if got := mustRun(t, p, bash(s, "cat /proc/$PPID/environ /proc/$PPID/mem 2>&1 >/dev/null; echo status $?")); !strings.Contains(got, "Permission denied") || !strings.HasSuffix(got, "status 1") {
			t.Errorf("cat /proc/<agent>/environ and mem: %q", got)
		}
	})

	sigs := []string{"TERM", "INT", "HUP", "QUIT", "SEGV", "USR1", "PIPE", "ALRM"}
	if opts.ShellNamespace == "" {
		t.Run("Signal", func(t *testing.T) {
			// Every signal bash may send, to the agent and to pid 1 (the agent): none may kill, stop or disturb
			// it, and the shell lives on.
			for _, sig := range append([]string{"KILL", "STOP"}, sigs...) {
				ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
				res, err := p.Execute(ctx, bash(s, fmt.Sprintf("kill -%s $PPID 1; echo sent $?", sig)))
				cancel()
				if err != nil || res.IsError {
					t.Fatalf("kill -%s <agent> 1: %v %q", sig, err, res.Text())
				}
				ctx, cancel = context.WithTimeout(context.Background(), 40*time.Second)
				res, err = p.Execute(ctx, bash(s, "echo $GUARD $PPID"))
				cancel()
				if errors.Is(err, sandbox.ErrSandboxDead) || err != nil {
					t.Fatalf("after kill -%s <agent> 1: the agent did not answer: %v", sig, err)
				}
				if got := res.Text(); got != "kept "+agentPID {
					t.Fatalf("after kill -%s <agent> 1: %q, want the same shell of the same agent (%q)", sig, got, "kept "+agentPID)
				}
			}
		})
	}

	t.Run("SignalEveryone", func(t *testing.T) {
		// The signal to pid 1, to -1 (every process the shell may signal) and to every pid /proc lists, the
		// shell's own last: the shell may die or stop (then the short command timeout kills it), the agent may
		// not: the call returns, and the next runs in the same sandbox (its /tmp is still there). A session of
		// its own, whose sandbox is made with the short timeout.
		const s = "guard-all"
		short := func(c *sandbox.Call) *sandbox.Call { c.Recipe.Limits.CommandTimeout = 2 * time.Second; return c }
		mark := fmt.Sprintf("guard-%d", time.Now().UnixNano())
		mustRun(t, p, short(bash(s, "echo "+mark+" >/tmp/guard-mark")))
		all := []string{"KILL", "STOP"}
		if opts.ShellNamespace != "" {
			all = append(all, sigs...)
		}
		for _, sig := range all {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			res, err := p.Execute(ctx, short(bash(s, fmt.Sprintf(
				"for p in 1 -1 $(ls /proc | grep -E '^[0-9]+$'); do [ \"$p\" = $$ ] || kill -%[1]s -- $p; done 2>/dev/null; kill -%[1]s $$; sleep 5; echo survived", sig))))
			cancel()
			if err != nil {
				t.Fatalf("kill -%s everyone: %v %q, want a result (the agent unharmed)", sig, err, res.Text())
			}
			t.Logf("kill -%s everyone: %q", sig, res.Text())
			// The check has a timeout of its own: a new shell's start after the kill is the machine's load (CI's
			// gVisor once took more than the 2 s), and a hung sandbox fails it all the same.
			check := short(call(s, "bash", map[string]any{"command": "cat /tmp/guard-mark", "timeout_ms": 30_000}))
			if got := mustRun(t, p, check); got != mark {
				t.Fatalf("after kill -%s everyone: /tmp/guard-mark is %q, want %q (the same sandbox)", sig, got, mark)
			}
		}
	})

	t.Run("Reap", func(t *testing.T) {
		// As pid 1 the agent inherits every orphan (the shell does, as its namespace's init, under
		// ShellNamespace): they must be reaped, or zombies eat the pids limit.
		got := mustRun(t, p, bash(s, "for i in 1 2 3 4 5; do (sleep 0.1 &); done; sleep 1; grep -h '^State:' /proc/[0-9]*/status | grep -c zombie; true"))
		if got != "0" {
			t.Errorf("zombies left: %q", got)
		}
	})
}

// agentBinPath is where the isolating backends put the agent (agent.BinPath).
const agentBinPath = "/.corral/agent"
