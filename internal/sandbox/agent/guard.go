package agent

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
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
// to the namespace's init. There the backend sets Config.ShellNamespace, and each shell runs in user, pid and
// mount namespaces of its own (runLauncher): bash is the init of a pid namespace the agent is not in, with a
// /proc of that namespace, so nothing it runs can name the agent (kill 1, kill -1 and every pid /proc lists
// reach only the shell's own processes); it keeps the sandbox's uid and gid (its launcher maps them) and has
// no capabilities, no bounding set and no_new_privs, and the whole seccomp deny list is back on it (the
// sandbox's profile lets clone make a user namespace and mount take a proc, for the launcher only).
//
// What did not work, and why the launcher has two stages: the agent cannot write the maps of a child it
// starts in a new user namespace (the child is not dumpable until it execs, as the agent is not, so its
// /proc maps are root's: EACCES); the child itself loses every capability when it execs unmapped, so it
// cannot write them, drop its bounding set or mount after its exec either. The outer stage, a fresh (dumpable)
// exec of the agent binary, writes the inner's maps as their owner and hands it CAP_SETPCAP and CAP_SYS_ADMIN
// as ambient capabilities, which survive the inner's exec long enough to mount /proc and drop everything.
// Without the shell's own /proc, ps fails (procps looks itself up by getpid in /proc). syscall's Pdeathsig
// kills a child started in a new pid namespace at once (it compares getppid, 0 there, to its parent's pid),
// so the inner stage sets it itself.

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
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, v, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE): %w", err)
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
