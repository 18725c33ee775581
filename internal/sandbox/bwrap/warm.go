package bwrap

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/corralhq/corral/internal/sandbox/agent"
	"github.com/corralhq/corral/internal/sandbox/cgroup"
	"github.com/corralhq/corral/internal/sandbox/host"
)

// A start kept ready (Config.Warm): a process, the agent binary in its spawn mode (agent.SpawnArg), parked in
// cgroups of their own before any session asks for a sandbox. Putting a process into a v1 cgroup takes the
// kernel's cgroup threadgroup lock for writing, which first waits for an RCU grace period when none has passed
// recently: 10-20 ms on an idle VM. A cold start overlaps it with bwrap's mounts and pays what it takes beyond
// them, the tail of its times (docs/benchmarks.md, stop 57). A ready start pays it in the background; the
// sandbox's start writes the sandbox's limits into the groups, renames them for the sandbox, and has the parked
// process drop to the sandbox's uid and become bwrap, whose processes are born in the groups.
type warmStart struct {
	group *cgroup.Group
	proc  *host.Process
	// marker is a directory under StateDir named as the groups are, as a sandbox's directory is named as its
	// groups: the sweep of a dead server's StateDir removes the groups named for its directories.
	marker string
	// The host's ends of bwrap's pipes (fds 3-5 in it: its arguments, --info-fd, the seccomp filter) and of the
	// spawn request's (fd 6, closed by the parked process before it becomes bwrap).
	argsW, infoR, seccompW, ctlW *os.File
}

// warmCtlFD and the fds before it are the parked process's ExtraFiles: 3 args, 4 info, 5 seccomp, 6 the request.
const warmCtlFD = 6

// discard kills the parked process and removes its groups.
func (w *warmStart) discard() {
	w.closePipes()
	if w.proc != nil {
		w.proc.Stop()
	}
	_ = w.group.Remove()
	_ = os.Remove(w.marker)
}

func (w *warmStart) closePipes() { closeAll(w.argsW, w.infoR, w.seccompW, w.ctlW) }

// warmer keeps Config.Warm starts ready, making a new one in the background as each is taken.
type warmer struct {
	n        int
	newStart func() (*warmStart, error)
	logger   *slog.Logger
	kick     chan struct{}
	done     chan struct{}
	wg       sync.WaitGroup
	once     sync.Once

	mu    sync.Mutex
	ready []*warmStart
}

func newWarmer(n int, newStart func() (*warmStart, error), logger *slog.Logger) *warmer {
	w := &warmer{n: n, newStart: newStart, logger: logger, kick: make(chan struct{}, 1), done: make(chan struct{})}
	w.wg.Go(w.fill)
	return w
}

// take returns a ready start, or nil when none is (a burst took them, or they cannot be made here): the
// caller starts cold. The caller calls refill once its start is over.
func (w *warmer) take() *warmStart {
	if w == nil {
		return nil
	}
	for {
		w.mu.Lock()
		if len(w.ready) == 0 {
			w.mu.Unlock()
			return nil
		}
		s := w.ready[len(w.ready)-1]
		w.ready = w.ready[:len(w.ready)-1]
		w.mu.Unlock()
		select {
		case <-s.proc.Exited():
			// Killed while parked (by an operator, or the OOM killer): make another.
			w.logger.Warn("bwrap: a start kept ready had exited; it is discarded and another made", "stderr", s.proc.Stderr())
			s.discard()
		default:
			return s
		}
	}
}

// refill has the starts taken made again. Called once a sandbox's start is over, so that making one (a process
// started, the kernel's wait to move it) does not take CPU from the start.
func (w *warmer) refill() {
	if w == nil {
		return
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// groups lists the cgroup directories of the starts ready.
func (w *warmer) groups() []string {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var dirs []string
	for _, s := range w.ready {
		dirs = append(dirs, s.group.Dirs()...)
	}
	return dirs
}

// fill keeps n starts ready until close. A failure is logged and retried with a growing pause, up to a minute:
// the sandboxes start cold meanwhile.
func (w *warmer) fill() {
	pause := 100 * time.Millisecond
	for {
		w.mu.Lock()
		short := len(w.ready) < w.n
		w.mu.Unlock()
		if !short {
			select {
			case <-w.kick:
				continue
			case <-w.done:
				return
			}
		}
		s, err := w.newStart()
		if err != nil {
			w.logger.Warn("bwrap: a start kept ready could not be made; sandboxes start cold", "err", err, "retry_in", pause)
			select {
			case <-time.After(pause):
				pause = min(2*pause, time.Minute)
				continue
			case <-w.done:
				return
			}
		}
		pause = 100 * time.Millisecond
		w.mu.Lock()
		w.ready = append(w.ready, s)
		w.mu.Unlock()
		select {
		case <-w.done:
			return // close discards it with the others
		default:
		}
	}
}

// close stops the filling and discards the starts still ready. Idempotent.
func (w *warmer) close() {
	if w == nil {
		return
	}
	w.once.Do(func() {
		close(w.done)
		w.wg.Wait()
		w.mu.Lock()
		ready := w.ready
		w.ready = nil
		w.mu.Unlock()
		for _, s := range ready {
			s.discard()
		}
	})
}

// newWarm starts the parked process and puts it into groups of its own, named warmPrefix and a random suffix
// (groups of a server that is gone are swept with the sandboxes'): the move, whose wait on the kernel a cold
// start may pay, done while nothing waits.
func (p *Provider) newWarm() (_ *warmStart, err error) {
	name := warmPrefix + randomID()
	w := &warmStart{marker: filepath.Join(p.cfg.StateDir, name)}
	if err := os.Mkdir(w.marker, 0o700); err != nil {
		return nil, err
	}
	if w.group, err = cgroup.New(p.cfg.CgroupRoot, name, cgroup.Limits{}); err != nil {
		_ = os.Remove(w.marker)
		return nil, err
	}
	defer func() {
		if err != nil {
			w.discard()
		}
	}()
	// The parked process's ends: 3 args, 4 info (bwrap writes it), 5 seccomp, 6 the request.
	var child [4]*os.File
	for i, end := range []**os.File{&w.argsW, &w.infoR, &w.seccompW, &w.ctlW} {
		rd, wr, perr := os.Pipe()
		if perr != nil {
			closeAll(child[:i]...)
			return nil, perr
		}
		child[i], *end = rd, wr
		if end == &w.infoR {
			child[i], *end = wr, rd
		}
	}
	defer closeAll(child[:]...)
	// The staged copy of the agent runs, root's own on the provider's tmpfs: the binary the sandboxes run, which
	// nobody but root can change.
	cmd := spawnCmd(p.agent, warmCtlFD)
	cmd.ExtraFiles = child[:]
	if err = closeOnExec(); err == nil {
		w.proc, err = host.StartProcess(cmd)
	}
	if err != nil {
		return nil, err
	}
	if err = w.group.Add(cmd.Process.Pid); err != nil {
		return nil, err
	}
	return w, nil
}

// startWarm starts bwrap with args from the ready start w, as the sandbox st's, and returns the host pid of the
// sandbox's pid 1; the agent's process is w.proc, its groups w.group, which st's teardown then removes. The
// groups take the sandbox's name and limits before the parked process is told, so that bwrap runs under them
// from its first instruction. An error that wraps errUnclaimed means w was never told (its process died while
// parked, or its groups refused the name or the limits) and is discarded: the caller starts cold.
func (p *Provider) startWarm(ctx context.Context, w *warmStart, st *host.Staged, args []string) (int, error) {
	defer w.closePipes()
	if err := p.claim(w, st, args); err != nil {
		w.discard()
		return 0, fmt.Errorf("%w: %w", errUnclaimed, err)
	}
	st.Add(w.group.Remove)
	st.Add(func() error { w.proc.Stop(); return nil })
	_ = os.Remove(w.marker) // the groups are named for the sandbox's directory now
	childPID, err := readChildPID(ctx, w.infoR, w.proc)
	if err != nil {
		return 0, fmt.Errorf("bwrap: sandbox did not start: %w", err)
	}
	return childPID, nil
}

// claim gives w's groups the sandbox's name and limits and tells the parked process what to become.
func (p *Provider) claim(w *warmStart, st *host.Staged, args []string) error {
	// The parked process's network namespace is the sandbox's (spawnCmd): bwrap keeps it.
	args = append(args, "--share-net", "--info-fd", "4", "--seccomp", "5")
	// writeClose makes each pipe hold what it writes, so no write waits for a reader. A parked process that
	// died fails them (EPIPE).
	if err := writeClose(w.argsW, argv(args)); err != nil {
		return err
	}
	if err := writeClose(w.seccompW, p.seccomp); err != nil {
		return err
	}
	if err := w.group.SetLimits(groupLimits(st.Limits)); err != nil {
		return err
	}
	if err := w.group.Rename(st.Name); err != nil {
		return err
	}
	req, err := json.Marshal(agent.SpawnRequest{Path: p.bwrap, Args: bwrapArgv(p.bwrap), Env: st.Env, UID: st.UID, GID: st.UID})
	if err != nil {
		return err
	}
	return writeClose(w.ctlW, req)
}

// spawnCmd runs the agent at path in its spawn mode, reading its request from fd, in a network namespace of its
// own whose loopback interface it brings up: the sandbox's, which bwrap keeps (claim's --share-net) instead of
// making one during the start. The namespace belongs to the host's user namespace, so that the sandbox, in a
// user namespace of bwrap's, holds no capability over it, as over the rest of the host. argv[0] is the agent's
// in-sandbox path, under which the corral binary too runs as the agent; the environment is empty, not the
// server's. The process dies with the server; once it is bwrap, --die-with-parent sees to that.
func spawnCmd(path string, fd int) *exec.Cmd {
	return &exec.Cmd{Path: path, Args: []string{agent.BinPath, agent.SpawnArg, strconv.Itoa(fd), agent.SpawnLoopback},
		Env: []string{}, Dir: "/",
		SysProcAttr: &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Setpgid: true, Pdeathsig: syscall.SIGKILL}}
}

// probeSpawn checks that the agent binary at path has the spawn mode: at the end of an empty request pipe it must
// exit saying so. An agent of a release before it would run as a parked start and never become bwrap, and one
// of the release before SpawnLoopback would leave the sandbox's loopback down.
func probeSpawn(path string) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	w.Close()
	defer r.Close()
	cmd := spawnCmd(path, 3)
	cmd.ExtraFiles = []*os.File{r}
	if err := closeOnExec(); err != nil {
		return err
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return err
	}
	timer := time.AfterFunc(10*time.Second, func() { _ = cmd.Process.Kill() })
	err = cmd.Wait()
	timer.Stop()
	if err == nil || !bytes.Contains(out.Bytes(), []byte(agent.SpawnArg+": no request")) {
		return fmt.Errorf("%s %s: %v: %q", path, agent.SpawnArg, err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// errUnclaimed marks startWarm's failures before the parked process was told anything.
var errUnclaimed = errors.New("bwrap: the start kept ready was not used")

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

// warmPrefix names the groups of starts kept ready. It begins as a sandbox's name does ("bwrap-"), so that the
// sweep of groups left by servers that are gone takes them too.
const warmPrefix = "bwrap-warm-"
