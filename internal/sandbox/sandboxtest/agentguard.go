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

// GuardOptions describes a backend's known limits for RunAgentGuard.
type GuardOptions struct {
	// InitKillable, when set, says why SIGKILL and SIGSTOP from inside the sandbox reach its pid 1 (gVisor does not
	// implement the protection Linux gives a pid namespace's init). RunAgentGuard then checks what must hold
	// instead: the call fails with sandbox.ErrSandboxDead (the sandbox is replaced, never trusted again) and the
	// next call runs in a fresh sandbox.
	InitKillable string
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

	t.Run("Trace", func(t *testing.T) {
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

	t.Run("Signal", func(t *testing.T) {
		// Every signal bash may send, to the agent and to pid 1: none may kill, stop or disturb the agent.
		sigs := []string{"KILL", "STOP"}
		if opts.InitKillable != "" {
			sigs = nil
		}
		for _, sig := range append(sigs, "TERM", "INT", "HUP", "QUIT", "SEGV", "USR1", "PIPE", "ALRM") {
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			res, err := p.Execute(ctx, bash(s, fmt.Sprintf("kill -%s $PPID 1; echo sent $?", sig)))
			cancel()
			if err != nil || res.IsError {
				t.Fatalf("kill -%s <agent> 1: %v %q", sig, err, text(res))
			}
			ctx, cancel = context.WithTimeout(context.Background(), 40*time.Second)
			res, err = p.Execute(ctx, bash(s, "echo $GUARD $PPID"))
			cancel()
			if errors.Is(err, sandbox.ErrSandboxDead) || err != nil {
				t.Fatalf("after kill -%s <agent> 1: the agent did not answer: %v", sig, err)
			}
			if got := text(res); got != "kept "+agentPID {
				t.Fatalf("after kill -%s <agent> 1: %q, want the same shell of the same agent (%q)", sig, got, "kept "+agentPID)
			}
		}
	})

	t.Run("Reap", func(t *testing.T) {
		// As pid 1 the agent inherits every orphan: it must reap them, or zombies eat the pids limit.
		got := mustRun(t, p, bash(s, "for i in 1 2 3 4 5; do (sleep 0.1 &); done; sleep 1; ps -eo stat= | grep -c '^Z'; true"))
		if got != "0" {
			t.Errorf("zombies left: %q", got)
		}
	})

	if opts.InitKillable == "" {
		return
	}
	t.Run("KillableInit", func(t *testing.T) {
		t.Logf("SIGKILL and SIGSTOP reach the agent here: %s", opts.InitKillable)
		// A short command timeout, so that a stopped agent is found hung soon (the timeout plus the host's grace).
		short := func(c *sandbox.Call) *sandbox.Call { c.Recipe.Limits.CommandTimeout = 2 * time.Second; return c }
		for _, sig := range []string{"KILL", "STOP"} {
			mustRun(t, p, short(bash(s, "export GUARD=kept")))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			res, err := p.Execute(ctx, short(bash(s, "kill -"+sig+" $PPID; sleep 5; echo survived")))
			cancel()
			if !errors.Is(err, sandbox.ErrSandboxDead) {
				t.Fatalf("kill -%s <agent>: %v %q, want ErrSandboxDead", sig, err, text(res))
			}
			if got := mustRun(t, p, short(bash(s, "echo fresh${GUARD}"))); got != "fresh" {
				t.Errorf("after kill -%s <agent>: %q, want a fresh sandbox", sig, got)
			}
		}
	})
}
