package agent

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
)

// The agent guards itself against the code it runs, which has the agent's own uid (a sandbox has one uid and no
// capabilities):
//
//   - It is not dumpable (PR_SET_DUMPABLE 0): a process without CAP_SYS_PTRACE can then neither ptrace it nor
//     open its /proc/<pid>/mem, environ or fd entries, where the agent's pipe to the host is. Its children
//     become dumpable again when they exec.
//   - It runs as the sandbox's pid 1 (every isolating backend starts it so). The kernel delivers no signal to a
//     pid namespace's init from inside the namespace unless init handles it, SIGKILL and SIGSTOP included; the
//     agent ignores every signal it can, so nothing in the sandbox can kill, stop or disturb it. Only the host
//     (outside the namespace) can kill it.
//   - As pid 1 it is the parent of every orphan in the sandbox, and reaps them (reaper), so that zombies do not
//     eat the pids limit.
//
// Under gVisor the second point does not hold: its kernel delivers SIGKILL and SIGSTOP from a namespace's members
// to the namespace's init. Such a signal ends or hangs the sandbox (the host then reports it dead and replaces it);
// it cannot hand the agent over. Making the agent unnameable from bash, by starting the shells in a pid namespace
// of their own, needs a user namespace (the agent has no capabilities), and the seccomp deny list refuses
// clone(CLONE_NEWUSER) and unshare; os/exec uses clone3 (which gVisor's profile lets through) only for
// CLONE_INTO_CGROUP or CLONE_NEWTIME, and a raw clone3 from a Go program is unsafe. A seccomp filter on the shells
// cannot name the agent's threads (a kill of any of their ids signals the agent), and a second uid for the shells
// would need CAP_SETUID in the agent and a second host uid per sandbox. Tried (2026-12-01): allowing
// clone(CLONE_NEWUSER) under gVisor only (clone3 already lets any process there make a user namespace) and
// starting the shell with CLONE_NEWUSER|CLONE_NEWPID does stop the signals (the agent is pid 0 in the shell's
// namespace, and kill -KILL 0 1 ends only the shell), but gVisor refuses the uid and gid maps from a writer
// without CAP_SETUID (EACCES), so the shell's processes would see themselves as nobody (65534) with a full
// capability bounding set in their namespace, which the red-team suite rightly reports as privileged. A
// launcher inside the new namespace could write its own maps (a process may map its own uid there) before it
// execs the shell; that is the next step.

// protectSelf makes the agent undumpable, and, when it is pid 1, ignores signals and starts reaping orphans. It
// reports whether the agent runs as pid 1.
func protectSelf() (bool, error) {
	if err := setDumpable(false); err != nil {
		return false, err
	}
	if os.Getpid() != 1 {
		return false, nil
	}
	signal.Ignore(ignoredSignals...)
	children.startReaping()
	return true, nil
}

func setDumpable(on bool) error {
	v := uintptr(0)
	if on {
		v = 1
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, v, 0); errno != 0 {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE): %w", errno)
	}
	return nil
}

// ignoredSignals are the signals pid 1 ignores: every catchable one but SIGCHLD (the reaper's), SIGURG (the Go
// runtime's preemption) and SIGPROF. The Go runtime keeps its handlers for the synchronous ones (SIGSEGV, SIGBUS,
// SIGFPE, SIGILL, SIGTRAP) and ignores them only when another process sent them.
var ignoredSignals = []os.Signal{
	syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGILL, syscall.SIGTRAP, syscall.SIGABRT,
	syscall.SIGBUS, syscall.SIGFPE, syscall.SIGUSR1, syscall.SIGSEGV, syscall.SIGUSR2, syscall.SIGPIPE,
	syscall.SIGALRM, syscall.SIGTERM, syscall.SIGSTKFLT, syscall.SIGCONT, syscall.SIGTSTP, syscall.SIGTTIN,
	syscall.SIGTTOU, syscall.SIGXCPU, syscall.SIGXFSZ, syscall.SIGVTALRM, syscall.SIGWINCH, syscall.SIGIO,
	syscall.SIGPWR, syscall.SIGSYS,
}

// children starts and waits for the agent's own children (its shells). As pid 1 the agent reaps every child
// itself, orphans included, and hands its own children's statuses to their waiters; otherwise it leaves waiting
// to os/exec.
var children = &reaper{}

type reaper struct {
	mu      sync.Mutex
	reaping bool
	waiters map[int]chan syscall.WaitStatus
}

func (r *reaper) startReaping() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reaping {
		return
	}
	r.reaping = true
	r.waiters = map[int]chan syscall.WaitStatus{}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	go func() {
		for range sigs {
			r.reap()
		}
	}()
	go r.reap() // what exited before the handler was installed
}

// reap collects every child that has exited. The lock is held throughout, so that a child started meanwhile
// is registered before its status can be collected.
func (r *reaper) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		if ch := r.waiters[pid]; ch != nil {
			ch <- ws
			delete(r.waiters, pid)
		}
	}
}

// childExit is how a child of the agent ended.
type childExit struct {
	code int   // its exit code, -1 when a signal killed it
	err  error // as exec.Cmd.Wait reports it
}

// start starts cmd and returns its pid and a channel that yields its exit once it has been reaped. Use the pid
// returned, not cmd.Process.Pid: Release, once the child is reaped, sets that to -1 (and kill(-(-1)) is kill(1)).
func (r *reaper) start(cmd *exec.Cmd) (int, <-chan childExit, error) {
	done := make(chan childExit, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return 0, nil, err
	}
	pid := cmd.Process.Pid
	if !r.reaping {
		go func() {
			err := cmd.Wait()
			done <- childExit{code: cmd.ProcessState.ExitCode(), err: err}
		}()
		return pid, done, nil
	}
	ch := make(chan syscall.WaitStatus, 1)
	r.waiters[pid] = ch
	go func() {
		ws := <-ch
		_ = cmd.Process.Release()
		exit := childExit{code: ws.ExitStatus()}
		switch {
		case ws.Signaled():
			exit.code = -1
			exit.err = fmt.Errorf("signal: %v", ws.Signal())
		case ws.ExitStatus() != 0:
			exit.err = fmt.Errorf("exit status %d", ws.ExitStatus())
		}
		done <- exit
	}()
	return pid, done, nil
}
