package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// bashInput is the bash tool's input, as in the reference schema.
type bashInput struct {
	Command   *string `json:"command"`
	Restart   bool    `json:"restart"`
	TimeoutMS *int64  `json:"timeout_ms"`
}

// MaxShells bounds the shells one sandbox runs at a time (one per thread of a multi-agent session, which has at
// most 25 threads, and the default one): a call naming a new shell past it gets an error result.
const MaxShells = 32

// maxShellName bounds the length of a shell's name (a thread's id).
const maxShellName = 128

// validShellName reports why name cannot name a shell: "" (the default shell) or 1 to maxShellName letters,
// digits, '_', '-' and '.'.
func validShellName(name string) error {
	if len(name) > maxShellName {
		return fmt.Errorf("invalid shell name: longer than %d bytes", maxShellName)
	}
	for _, c := range []byte(name) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("invalid shell name %q: only letters, digits, '_', '-' and '.' are allowed", name)
		}
	}
	return nil
}

// bashTool owns the persistent shells, one per name (Request.Shell): the threads of a session share the
// sandbox and its filesystem, each with a shell (cwd, variables) of its own. A shell starts on the first call
// naming it. Calls to one shell are serialised, one command at a time; calls to different shells run
// concurrently.
type bashTool struct {
	cfg Config

	mu     sync.Mutex
	shells map[string]*shellSlot // the named shells in use or started
	closed bool
}

// shellSlot is one named shell.
type shellSlot struct {
	turn  chan struct{} // holds one token while a call (or warm, or close) uses the shell
	users int           // calls holding or waiting for turn, guarded by bashTool.mu
	sess  *shell        // nil until started, or after it was killed; guarded by turn
}

func newBashTool(cfg Config) *bashTool {
	return &bashTool{cfg: cfg, shells: map[string]*shellSlot{}}
}

// errShellBound is the error of a call naming a new shell when MaxShells are in use.
var errShellBound = fmt.Errorf("this sandbox already runs %d shells (one per thread), its limit; "+
	"a bash call with restart and no command ends a thread's shell", MaxShells)

var errAgentClosed = errors.New("the sandbox agent is shutting down")

// acquire waits for the turn of the shell named name, adding it if it is new unless onlyExisting. It returns a
// nil slot without error when onlyExisting and the shell does not exist. release gives the turn back.
func (t *bashTool) acquire(ctx context.Context, name string, onlyExisting bool) (*shellSlot, error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, errAgentClosed
	}
	sl := t.shells[name]
	if sl == nil {
		if onlyExisting {
			t.mu.Unlock()
			return nil, nil
		}
		if len(t.shells) >= MaxShells {
			t.mu.Unlock()
			return nil, errShellBound
		}
		sl = &shellSlot{turn: make(chan struct{}, 1)}
		t.shells[name] = sl
	}
	sl.users++
	t.mu.Unlock()
	select {
	case sl.turn <- struct{}{}:
	case <-ctx.Done():
		t.mu.Lock()
		t.drop(name, sl)
		t.mu.Unlock()
		return nil, ctx.Err()
	}
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	if closed {
		t.release(name, sl)
		return nil, errAgentClosed
	}
	return sl, nil
}

// release gives back the turn of a shell acquire returned. A shell that is not running and that no other call
// waits for is forgotten: its name no longer counts towards MaxShells.
func (t *bashTool) release(name string, sl *shellSlot) {
	t.mu.Lock()
	t.drop(name, sl)
	t.mu.Unlock()
	<-sl.turn
}

// drop ends one use of sl, with t.mu held, and forgets sl when it is unused and has no shell. It reads sl.sess
// only when no other call holds or waits for the turn (sl.users is zero), so never while another call writes
// it.
func (t *bashTool) drop(name string, sl *shellSlot) {
	sl.users--
	if sl.users == 0 && sl.sess == nil && t.shells[name] == sl {
		delete(t.shells, name)
	}
}

// warm starts the default shell ahead of the first call, so that the first call does not wait for bash to
// start. The other shells start on their first call.
func (t *bashTool) warm() {
	sl, err := t.acquire(context.Background(), "", false)
	if err != nil {
		return
	}
	defer t.release("", sl)
	if sl.sess == nil {
		if s, err := startShell(t.cfg); err == nil {
			sl.sess = s
		}
	}
}

// close kills every shell, after the calls running in them; later calls fail.
func (t *bashTool) close() {
	t.mu.Lock()
	t.closed = true
	slots := make([]*shellSlot, 0, len(t.shells))
	for _, sl := range t.shells {
		sl.users++ // kept until killed below
		slots = append(slots, sl)
	}
	t.mu.Unlock()
	for _, sl := range slots {
		sl.turn <- struct{}{}
		if sl.sess != nil {
			sl.sess.kill()
			sl.sess = nil
		}
		<-sl.turn
	}
}

func (t *bashTool) run(ctx context.Context, shellName string, raw json.RawMessage, timeout time.Duration, outCap int) result {
	var in bashInput
	if err := decodeStrict(raw, &in); err != nil {
		return errorf("invalid bash input: %v", err)
	}
	if in.TimeoutMS != nil {
		if *in.TimeoutMS <= 0 || *in.TimeoutMS > MaxTimeoutMS {
			return errorf("invalid bash input: timeout_ms must be a positive number of milliseconds, at most %d", MaxTimeoutMS)
		}
		timeout = time.Duration(*in.TimeoutMS) * time.Millisecond
	}
	noCommand := in.Command == nil || *in.Command == ""
	if noCommand && !in.Restart {
		return errorf("invalid bash input: command is required")
	}
	// Wait for the shell, or give up with the caller. A restart alone does not start a shell that is not there.
	sl, err := t.acquire(ctx, shellName, in.Restart && noCommand)
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return errorf("bash: the call was cancelled while it waited for the shell")
	case err != nil:
		return errorf("bash: %v", err)
	case sl == nil:
		return textResult("bash session restarted")
	}
	defer t.release(shellName, sl)
	if in.Restart {
		if sl.sess != nil {
			sl.sess.kill()
			sl.sess = nil
		}
		if noCommand {
			return textResult("bash session restarted")
		}
	}
	if sl.sess == nil {
		s, err := startShell(t.cfg)
		if err != nil {
			return errorf("bash: start shell: %v", err)
		}
		sl.sess = s
	}
	out, code, err := sl.sess.exec(ctx, *in.Command, timeout, outCap)
	res := commandResult(sl, out, code, err, timeout)
	res.capped = true
	return res
}

// commandResult is the result of a command run in sl's shell, whose turn the caller holds.
func commandResult(sl *shellSlot, out string, code int, err error, timeout time.Duration) result {
	if err != nil {
		// The shell is in an unknown state (killed on timeout, exited, or the call was cancelled): replace it.
		sess := sl.sess
		sess.kill()
		sl.sess = nil
		switch {
		case errors.Is(err, errTimedOut):
			res := errorf("%s\n[command timed out after %s; its process group was killed and the shell restarted (cwd and variables reset)]", out, timeout)
			res.failure = FailureTimeout
			return res
		case errors.Is(err, errShellExited):
			// kill waited for the shell to be reaped.
			return errorf("%s\nexit code: %d\n[the shell exited; the next call starts a new shell]", out, sess.code)
		}
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return errorf("%s\n[the call was cancelled; its process group was killed and the shell restarted]", out)
		}
		return errorf("%s\nbash: %v", out, err)
	}
	if code != 0 {
		return errorf("%s\nexit code: %d", out, code)
	}
	return textResult(out)
}

var (
	errTimedOut    = errors.New("command timed out")
	errShellExited = errors.New("shell exited")
)

// shell is one persistent /bin/bash in its own process group, reading commands from a pipe, its stdout and
// stderr on one pipe.
type shell struct {
	cmd    *exec.Cmd
	pid    int // the shell's pid and process group
	stdin  *os.File
	out    *os.File
	exited chan struct{} // closed when the shell has been reaped
	status error         // how it ended, as exec.Cmd.Wait says it, once exited is closed
	code   int           // its exit code, -1 when a signal killed it, once exited is closed

	mu        sync.Mutex
	buf       []byte
	dropped   int // bytes dropped from the front of buf since the call began
	limit     int
	notify    chan struct{}
	drainDone chan struct{}
}

func startShell(cfg Config) (*shell, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("stdin pipe: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("output pipe: %w", err)
	}
	cmd, err := shellCommand(cfg)
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd.Dir = cfg.Workspace
	cmd.Env = append(append([]string(nil), cfg.Env...), "HISTFILE=", "PS1=", "PS2=")
	cmd.Stdin = inR
	cmd.Stdout = outW
	cmd.Stderr = outW
	pid, exit, err := children.start(cmd)
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("start /bin/bash: %w", err)
	}
	// The shell and everything it starts are the first the kernel should kill when the sandbox runs out of
	// memory, so the agent survives to report it. Raising one's own oom_score_adj needs no privilege.
	_ = os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte("1000"), 0)
	s := &shell{
		cmd: cmd, pid: pid, stdin: inW, out: outR,
		exited: make(chan struct{}), notify: make(chan struct{}, 1), drainDone: make(chan struct{}),
	}
	// The shell keeps a copy of the output pipe in a variable of its own (a descriptor of 10 or above, read-only):
	// exec restores stdout and stderr from it after every command.
	if _, err := inW.WriteString("exec {__corral_out}>&1; readonly __corral_out\n"); err != nil {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	go func() {
		e := <-exit
		s.status, s.code = e.err, e.code
		close(s.exited)
	}()
	go s.drain()
	return s, nil
}

func (s *shell) drain() {
	defer close(s.drainDone)
	tmp := make([]byte, 32*1024)
	for {
		n, err := s.out.Read(tmp)
		if n > 0 {
			s.mu.Lock()
			s.buf = append(s.buf, tmp[:n]...)
			// Keep only the tail: a command that floods its output must not exhaust the agent's memory, and the
			// end marker arrives last.
			if s.limit > 0 && len(s.buf) > 2*s.limit {
				over := len(s.buf) - s.limit
				s.dropped += over
				s.buf = append(s.buf[:0], s.buf[over:]...)
			}
			s.mu.Unlock()
			select {
			case s.notify <- struct{}{}:
			default:
			}
		}
		if err != nil {
			return
		}
	}
}

// kill kills the shell's process group and releases its pipes. It returns once the group is gone (within
// groupGoneWait): a killed process lingers until the kernel has torn it down and its parent reaped it, and the
// next call must not see the last one's processes.
func (s *shell) kill() {
	_ = syscall.Kill(-s.pid, syscall.SIGKILL)
	s.stdin.Close()
	<-s.exited
	s.out.Close() // unblocks drain even when a process outside the group still holds the pipe
	<-s.drainDone
	for deadline := time.Now().Add(groupGoneWait); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if syscall.Kill(-s.pid, syscall.SIGKILL) == syscall.ESRCH {
			return
		}
	}
}

// groupGoneWait bounds how long kill waits for a killed group's processes to be gone.
const groupGoneWait = 2 * time.Second

// exec runs command in the shell and returns its combined output (the last outCap bytes, with a note when
// more was written) and exit status.
func (s *shell) exec(ctx context.Context, command string, timeout time.Duration, outCap int) (string, int, error) {
	nonce := make([]byte, 12)
	_, _ = rand.Read(nonce)
	tag := "__CORRAL_" + hex.EncodeToString(nonce)
	marker := tag + "_DONE__"
	// The command travels as a quoted here-document and runs through eval, so a syntax error in it cannot
	// swallow the end marker; the marker is split in the script so that echoing the script cannot fake it.
	// The marker goes to the output pipe through the shell's saved copy of it (see startShell), and stdout and
	// stderr are pointed back at the pipe before it is written: a command that closed or redirected them (exec
	// >&-, exec >log) finishes its call, and the next call's output is seen again. A shell that cannot restore
	// them exits, which ends the call too.
	script := fmt.Sprintf("IFS= read -r -d '' __corral_cmd <<'%s'\n%s\n%s\neval \"$__corral_cmd\" </dev/null; __corral_st=$?; exec >&\"$__corral_out\" 2>&1 || exit 125; printf '\\n%%s%%s%%d\\n' '%s' '%s' \"$__corral_st\"\n",
		tag, command, tag, marker[:len(marker)/2], marker[len(marker)/2:])

	s.mu.Lock()
	s.buf = s.buf[:0]
	s.dropped = 0
	s.limit = outCap + len(marker) + 32
	s.mu.Unlock()
	if _, err := s.stdin.WriteString(script); err != nil {
		return "", -1, fmt.Errorf("%w: write command: %v", errShellExited, err)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		var stop error
		select {
		case <-ctx.Done():
			stop = ctx.Err()
		case <-s.exited:
			// Give the drain a moment to collect what the shell wrote last.
			select {
			case <-s.drainDone:
			case <-time.After(100 * time.Millisecond):
			}
			stop = fmt.Errorf("%w: %v", errShellExited, s.status)
		case <-timer.C:
			stop = errTimedOut
		case <-s.notify:
		}
		s.mu.Lock()
		out := append([]byte(nil), s.buf...)
		dropped := s.dropped
		s.mu.Unlock()
		if i := bytes.Index(out, []byte(marker)); i >= 0 {
			code, err := strconv.Atoi(string(bytes.TrimSpace(out[i+len(marker):])))
			if err != nil {
				continue // the status line is not complete yet
			}
			// Drop the newline the marker line starts with, and the output's own final newline.
			body := bytes.TrimSuffix(bytes.TrimSuffix(out[:i], []byte("\n")), []byte("\n"))
			return tail(body, dropped, outCap), code, nil
		}
		if stop != nil {
			if errors.Is(stop, errTimedOut) {
				_ = syscall.Kill(-s.pid, syscall.SIGKILL)
			}
			return tail(out, dropped, outCap), -1, stop
		}
	}
}

// tail returns the last outCap bytes of out, noting how many were dropped.
func tail(out []byte, dropped, outCap int) string {
	if len(out) > outCap {
		dropped += len(out) - outCap
		out = out[len(out)-outCap:]
	}
	if dropped > 0 {
		return fmt.Sprintf("[output truncated: the first %d bytes were dropped]\n%s", dropped, out)
	}
	return string(out)
}
