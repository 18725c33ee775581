package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/agent"
	"github.com/corralhq/corral/internal/sandbox/cgroup"
)

// Defaults for sandbox.Limits left zero.
const (
	DefaultCommandTimeout = agent.DefaultTimeoutMS * time.Millisecond
	DefaultMemoryBytes    = 2 << 30
	DefaultPids           = 1024
	// DefaultTmpBytes and DefaultTmpInodes bound /tmp, a tmpfs counted in the sandbox's memory.
	DefaultTmpBytes  = 512 << 20
	DefaultTmpInodes = 65536
	// hangGrace is how long past a call's timeout the host waits before it declares the agent hung.
	hangGrace = 15 * time.Second
)

// WithDefaults fills the zero fields of l with the defaults.
func WithDefaults(l sandbox.Limits) sandbox.Limits {
	if l.CommandTimeout <= 0 {
		l.CommandTimeout = DefaultCommandTimeout
	}
	if l.OutputBytes <= 0 {
		l.OutputBytes = agent.DefaultOutputCap
	}
	if l.MemoryBytes <= 0 {
		l.MemoryBytes = DefaultMemoryBytes
	}
	if l.Pids <= 0 {
		l.Pids = DefaultPids
	}
	if l.TmpBytes <= 0 {
		l.TmpBytes = DefaultTmpBytes
	}
	if l.TmpInodes <= 0 {
		l.TmpInodes = DefaultTmpInodes
	}
	return l
}

// Process is a started agent process: the command and the client on its pipes.
type Process struct {
	Cmd    *exec.Cmd
	Client *Client
	stderr *TailWriter
	exited chan struct{}
	pipes  []*os.File
}

// StartProcess starts cmd (which must run the agent, or a launcher that hands its stdio to the agent) with its
// stdin and stdout as the protocol's pipes. The pipes are the host's own, not exec's, so they outlive a launcher
// that exits once the agent runs (runc create). Its stderr is kept (the last few KiB) for error reports. cmd's
// other fields (Env, ExtraFiles, SysProcAttr) are the caller's.
func StartProcess(cmd *exec.Cmd) (*Process, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("agent stdin: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("agent stdout: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("agent stderr: %w", err)
	}
	p := &Process{Cmd: cmd, stderr: NewTailWriter(4096), exited: make(chan struct{}), pipes: []*os.File{inW, outR, errR}}
	cmd.Stdin = inR
	cmd.Stdout = outW
	// stderr too is a pipe of our own, read by our own goroutine: with exec's, Wait would wait for every holder
	// of the pipe (the agent itself, when a launcher hands its stdio over).
	cmd.Stderr = errW
	err = cmd.Start()
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	go func() { _, _ = io.Copy(p.stderr, errR) }()
	p.Client = NewClient(inW, outR)
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// Stop kills the process (only the process: a sandbox has its own teardown), waits for it and closes the
// protocol pipes. For a Process that never became a Sandbox.
func (p *Process) Stop() {
	_ = p.Cmd.Process.Kill()
	<-p.exited
	p.closePipes()
}

// closePipes closes the host's ends of the protocol pipes.
func (p *Process) closePipes() {
	for _, f := range p.pipes {
		f.Close()
	}
}

// Exited is closed once the process has been reaped.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Stderr returns the tail of what the process wrote to stderr.
func (p *Process) Stderr() string { return strings.TrimSpace(p.stderr.String()) }

// Sandbox is a sandbox.Sandbox served by an agent process. Every backend builds one once its agent runs.
type Sandbox struct {
	proc   *Process
	limits sandbox.Limits
	group  *cgroup.Group // nil when the backend enforces no cgroup limits itself
	// teardown kills what the backend started and releases its resources, in order; run once by Close.
	teardown []func() error

	mu     sync.Mutex
	seen   cgroup.Events
	closed bool
	dead   error
}

// NewSandbox wraps a started agent. group, if set, is read after each call to report limits that were hit.
// teardown runs once on Close, in order, after the agent process has been killed.
func NewSandbox(proc *Process, limits sandbox.Limits, group *cgroup.Group, teardown ...func() error) *Sandbox {
	return &Sandbox{proc: proc, limits: WithDefaults(limits), group: group, teardown: teardown}
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

// CgroupDirs are the host directories of the sandbox's cgroups (none without limits). The crash suite checks
// that none outlive a server.
func (s *Sandbox) CgroupDirs() []string {
	if s.group == nil {
		return nil
	}
	return s.group.Dirs()
}

// Ping waits until the agent answers a request, proving that it runs.
func (s *Sandbox) Ping(ctx context.Context) error {
	res, err := s.proc.Client.Call(ctx, "", agent.PingTool, json.RawMessage(`{}`), 10*time.Second, 0, 5*time.Second)
	if err != nil {
		if tail := s.proc.Stderr(); tail != "" {
			err = fmt.Errorf("%w (agent stderr: %s)", err, lastLine(tail))
		}
		return err
	}
	if res.IsError {
		return errors.New("agent: ping failed")
	}
	return nil
}

// OnClose adds f to what Close runs, after the ones already added.
func (s *Sandbox) OnClose(f func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.teardown = append(s.teardown, f)
}

// Execute runs one tool call in the sandbox, a bash call in the named shell.
func (s *Sandbox) Execute(ctx context.Context, shell, name string, input json.RawMessage) (sandbox.Result, error) {
	s.mu.Lock()
	if s.dead != nil {
		err := s.dead
		s.mu.Unlock()
		return sandbox.Result{}, err
	}
	prev := s.seen
	s.mu.Unlock()
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if s.group != nil {
		// A fork bomb keeps the sandbox at its pids limit for as long as the call runs: watch for it and stop
		// the call at once rather than at its timeout.
		stop := make(chan struct{})
		defer close(stop)
		go WatchPids(50*time.Millisecond, func() (int, bool) { return s.group.Events().PidsMax, true }, prev.PidsMax, cancel, stop)
	}
	res, err := s.proc.Client.Call(callCtx, shell, name, input, s.limits.CommandTimeout, s.limits.OutputBytes, hangGrace)
	if err != nil && !errors.Is(err, sandbox.ErrSandboxDead) && ctx.Err() != nil {
		return res, err // the caller gave up
	}
	var ev cgroup.Events
	if s.group != nil {
		ev = s.group.Events()
	}
	s.mu.Lock()
	s.seen = ev
	s.mu.Unlock()
	switch {
	case ev.PidsMax > prev.PidsMax:
		// Whatever forked past the limit may still be forking: stop the whole sandbox. The next call gets a
		// fresh one with the same workspace.
		return sandbox.Result{}, s.die(fmt.Errorf("%w: it reached its limit of %d processes (a fork bomb?); all its processes were killed%w", sandbox.ErrSandboxDead, s.limits.Pids, LimitHit))
	case err != nil && ev.OOMKills > prev.OOMKills:
		return sandbox.Result{}, s.die(fmt.Errorf("%w: it ran out of memory (limit %d MiB) and the kernel killed its agent%w", sandbox.ErrSandboxDead, s.limits.MemoryBytes>>20, LimitHit))
	case err != nil:
		if tail := s.proc.Stderr(); tail != "" {
			err = fmt.Errorf("%w (agent stderr: %s)", err, lastLine(tail))
		}
		return sandbox.Result{}, s.die(err)
	case ev.OOMKills > prev.OOMKills:
		OOMKilled(&res, s.limits.MemoryBytes, ev.OOMKills-prev.OOMKills)
	}
	return res, nil
}

// LimitHit, wrapped (%w) at the end of a dead sandbox's error, marks a death by a limit (sandbox.ErrLimit)
// without adding to the message.
var LimitHit error = silent{sandbox.ErrLimit}

// silent wraps an error for errors.Is and prints nothing.
type silent struct{ err error }

func (s silent) Error() string { return "" }
func (s silent) Unwrap() error { return s.err }

// WatchPids calls cancel once pidsMax (how many forks the sandbox's pids limit refused; false when it could
// not tell) says more than seen, asking every interval, until stop is closed.
func WatchPids(every time.Duration, pidsMax func() (int, bool), seen int, cancel func(), stop <-chan struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if n, ok := pidsMax(); ok && n > seen {
				cancel()
				return
			}
		}
	}
}

// OOMKilled adds to res that the kernel killed kills of the sandbox's processes at its memory limit, and marks
// it a limit's failure.
func OOMKilled(res *sandbox.Result, limitBytes int64, kills int) {
	res.IsError, res.Failure = true, sandbox.FailureLimit
	res.Content = append(res.Content, apitype.TextBlock(fmt.Sprintf(
		"\n[the sandbox reached its memory limit of %d MiB; the kernel killed %d process(es) (oom-kill)]", limitBytes>>20, kills)))
}

// die records that the sandbox is dead, kills what is left of it and returns err.
func (s *Sandbox) die(err error) error {
	s.mu.Lock()
	if s.dead == nil {
		s.dead = err
	}
	s.mu.Unlock()
	s.kill()
	return err
}

func (s *Sandbox) kill() {
	if s.group != nil {
		s.group.Kill()
	} else {
		// Without a cgroup to kill, ask the agent to kill its shells first; SIGKILL whatever is left after a
		// second.
		_ = s.proc.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.proc.exited:
		case <-time.After(time.Second):
		}
	}
	_ = s.proc.Cmd.Process.Kill()
	<-s.proc.exited
	s.proc.closePipes()
}

// Close kills every process of the sandbox and releases its resources. Idempotent.
func (s *Sandbox) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	if s.dead == nil {
		s.dead = fmt.Errorf("%w: sandbox closed", sandbox.ErrSandboxDead)
	}
	s.mu.Unlock()
	s.kill()
	s.mu.Lock()
	teardown := s.teardown
	s.mu.Unlock()
	var errs []error
	for _, f := range teardown {
		errs = append(errs, f())
	}
	return errors.Join(errs...)
}

func lastLine(s string) string {
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// TailWriter keeps the last bytes written to it (an agent's stderr, for error reports).
type TailWriter struct {
	mu  sync.Mutex
	max int
	buf []byte
}

var _ io.Writer = (*TailWriter)(nil)

// NewTailWriter returns a TailWriter that keeps the last max bytes.
func NewTailWriter(max int) *TailWriter { return &TailWriter{max: max} }

func (w *TailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if over := len(w.buf) - w.max; over > 0 {
		w.buf = append(w.buf[:0], w.buf[over:]...)
	}
	return len(p), nil
}

func (w *TailWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.buf)
}
