package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBashClosedStdout: a command that closes or redirects the shell's stdout and stderr returns when it
// finishes, not when its timeout (60 s here) ends; the test's own deadline (20 s) catches a hang.
func TestBashClosedStdout(t *testing.T) {
	t.Parallel()
	s, _ := newTestServer(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	run := func(command string) (string, bool) {
		t.Helper()
		in, _ := json.Marshal(map[string]any{"command": command, "timeout_ms": 60000})
		resp := s.Handle(ctx, Request{Tool: "bash", Input: in, OutputCap: 4096})
		if ctx.Err() != nil {
			t.Fatalf("%q: still running at the test's deadline (the call hung): %+v", command, resp)
		}
		var b strings.Builder
		for _, c := range resp.Content {
			b.WriteString(c.Text)
		}
		return b.String(), resp.IsError
	}
	for _, tc := range []struct {
		command string
		want    string // the result holds it
		isErr   bool
	}{
		{"exec 1>&- 2>&-; true", "", false},
		{"exec >&-; echo to-stderr >&2", "to-stderr", false},
		{"exec >/dev/null 2>&1; echo hidden", "", false},
		{"exec 2>&-; echo after-stderr-closed", "after-stderr-closed", false},
		{"exec >&-; sleep 30 & echo x >&2; exit 0", "the shell exited", true},
		{"exec 1>&- 2>&-; sleep 30 & exit 3", "exit code: 3", true},
		// Closing the shell's saved copy of the pipe too: the shell cannot restore its output, exits, and the
		// call ends with it.
		{"exec {__corral_out}>&- 1>&- 2>&-; true", "the shell exited", true},
	} {
		out, isErr := run(tc.command)
		if isErr != tc.isErr || !strings.Contains(out, tc.want) || strings.Contains(out, "timed out") {
			t.Errorf("%q: is_error %v, %q; want is_error %v and %q", tc.command, isErr, out, tc.isErr, tc.want)
		}
		// The shell (or its replacement) still answers on its own stdout.
		if out, isErr := run("echo next"); isErr || out != "next" {
			t.Errorf("after %q: %v %q", tc.command, isErr, out)
		}
	}
}

// shellCall runs a bash call in the named shell and returns its text and whether it is an error result.
func shellCall(ctx context.Context, s *Server, shell string, input map[string]any) (string, bool) {
	in, _ := json.Marshal(input)
	resp := s.Handle(ctx, Request{Tool: "bash", Shell: shell, Input: in, OutputCap: 4096})
	var b strings.Builder
	for _, c := range resp.Content {
		b.WriteString(c.Text)
	}
	return b.String(), resp.IsError
}

// TestBashShells: each named shell keeps its own cwd and variables, the filesystem is one, and a restart
// affects only its shell.
func TestBashShells(t *testing.T) {
	t.Parallel()
	s, ws := newTestServer(t, false)
	ctx := context.Background()
	run := func(shell, command string) string {
		t.Helper()
		out, isErr := shellCall(ctx, s, shell, map[string]any{"command": command})
		if isErr {
			t.Fatalf("shell %q: %q: error result %q", shell, command, out)
		}
		return out
	}
	run("A", "echo from-a > shared.txt && cd /tmp && export X=1 && Y=2")
	run("", "export X=default")
	if got := run("A", `pwd; echo "[$X$Y]"`); got != "/tmp\n[12]" {
		t.Errorf("shell A: %q, want its own cwd and variables", got)
	}
	if got, want := run("B", `pwd; echo "[$X$Y]"; cat shared.txt`), ws+"\n[]\nfrom-a"; got != want {
		t.Errorf("shell B: %q, want %q (its own cwd and variables, A's file)", got, want)
	}
	if got := run("", `echo "[$X]"`); got != "[default]" {
		t.Errorf("the default shell: %q", got)
	}
	// A restart resets one shell.
	if out, isErr := shellCall(ctx, s, "A", map[string]any{"restart": true}); isErr || !strings.Contains(out, "restarted") {
		t.Errorf("restart A: %v %q", isErr, out)
	}
	if got := run("A", `pwd; echo "[$X]"`); got != ws+"\n[]" {
		t.Errorf("shell A after its restart: %q", got)
	}
	if got := run("", `echo "[$X]"`); got != "[default]" {
		t.Errorf("the default shell after A's restart: %q", got)
	}
	// A timeout kills its own shell only.
	run("B", "export KEEP=b")
	if out, isErr := shellCall(ctx, s, "A", map[string]any{"command": "export GONE=1; sleep 30", "timeout_ms": 300}); !isErr || !strings.Contains(out, "timed out") {
		t.Errorf("timeout in A: %v %q", isErr, out)
	}
	if got := run("B", `echo "[$KEEP]"`); got != "[b]" {
		t.Errorf("shell B after A's timeout: %q", got)
	}
	if got := run("A", `echo "[$GONE]"`); got != "[]" {
		t.Errorf("shell A after its timeout: %q", got)
	}
}

// TestBashShellsConcurrent: a command that blocks in shell A does not block shell B, while a second call to
// shell A waits for the first. Asserted by order: A blocks until the test releases it, after B has answered.
func TestBashShellsConcurrent(t *testing.T) {
	t.Parallel()
	s, ws := newTestServer(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type answer struct {
		out   string
		isErr bool
	}
	call := func(shell, command string) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			out, isErr := shellCall(ctx, s, shell, map[string]any{"command": command, "timeout_ms": 60000})
			ch <- answer{out, isErr}
		}()
		return ch
	}
	first := call("A", "touch started; while [ ! -e release ]; do sleep 0.02; done; echo A done")
	for {
		if _, err := os.Stat(filepath.Join(ws, "started")); err == nil {
			break
		}
		select {
		case a := <-first:
			t.Fatalf("A ended before it was released: %+v", a)
		case <-ctx.Done():
			t.Fatal("A did not start")
		case <-time.After(10 * time.Millisecond):
		}
	}
	second := call("A", "ls release && echo A again")
	// B answers while A still waits for its release (nothing else releases it).
	if out, isErr := shellCall(ctx, s, "B", map[string]any{"command": "echo B"}); isErr || out != "B" {
		t.Fatalf("shell B while A runs: %v %q", isErr, out)
	}
	select {
	case a := <-first:
		t.Fatalf("A ended before it was released: %+v", a)
	default:
	}
	if err := os.WriteFile(filepath.Join(ws, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if a := <-first; a.isErr || a.out != "A done" {
		t.Errorf("A: %+v", a)
	}
	// The second call to A ran after the first: it saw the release.
	if a := <-second; a.isErr || a.out != "release\nA again" {
		t.Errorf("the second call to A: %+v", a)
	}
}

// TestBashShellBound: at most MaxShells shells run; a call naming one more is refused until a restart with no
// command ends one. Names are checked.
func TestBashShellBound(t *testing.T) {
	t.Parallel()
	s, _ := newTestServer(t, false)
	ctx := context.Background()
	for i := range MaxShells {
		if out, isErr := shellCall(ctx, s, fmt.Sprintf("t%d", i), map[string]any{"command": "echo " + strconv.Itoa(i)}); isErr || out != strconv.Itoa(i) {
			t.Fatalf("shell %d: %v %q", i, isErr, out)
		}
	}
	out, isErr := shellCall(ctx, s, "one-more", map[string]any{"command": "echo ran"})
	if !isErr || !strings.Contains(out, fmt.Sprintf("already runs %d shells", MaxShells)) {
		t.Errorf("shell %d: %v %q, want the limit's error", MaxShells+1, isErr, out)
	}
	// The default shell counts too; a shell in use answers still.
	if out, isErr := shellCall(ctx, s, "", map[string]any{"command": "echo ran"}); !isErr {
		t.Errorf("the default shell past the bound: %q", out)
	}
	if out, isErr := shellCall(ctx, s, "t3", map[string]any{"command": "echo ran"}); isErr || out != "ran" {
		t.Errorf("an existing shell at the bound: %v %q", isErr, out)
	}
	// A restart with no command of a shell that does not exist starts none.
	if out, isErr := shellCall(ctx, s, "absent", map[string]any{"restart": true}); isErr || !strings.Contains(out, "restarted") {
		t.Errorf("restart of an absent shell: %v %q", isErr, out)
	}
	// Ending a shell makes room.
	if out, isErr := shellCall(ctx, s, "t3", map[string]any{"restart": true}); isErr || !strings.Contains(out, "restarted") {
		t.Errorf("restart t3: %v %q", isErr, out)
	}
	if out, isErr := shellCall(ctx, s, "one-more", map[string]any{"command": "echo ran"}); isErr || out != "ran" {
		t.Errorf("a new shell after one ended: %v %q", isErr, out)
	}
	for _, name := range []string{"a/b", "a b", "$(id)", "é", strings.Repeat("x", 129)} {
		for _, tool := range []string{"bash", "read"} {
			resp := s.Handle(ctx, Request{Tool: tool, Shell: name, Input: json.RawMessage(`{"command": "echo ran", "file_path": "x"}`)})
			if !resp.IsError || len(resp.Content) == 0 || !strings.Contains(resp.Content[0].Text, "invalid shell name") {
				t.Errorf("%s in shell %q: %+v", tool, name, resp)
			}
		}
	}
	if out, isErr := shellCall(ctx, s, "sthr_01AbC-9.x", map[string]any{"command": "echo ok"}); !isErr || !strings.Contains(out, "already runs") {
		t.Errorf("a valid name at the bound: %v %q", isErr, out)
	}
}
