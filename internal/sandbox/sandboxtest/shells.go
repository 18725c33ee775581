package sandboxtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/sandbox"
)

// inShell is c run in the named shell.
func inShell(shell string, c *sandbox.Call) *sandbox.Call {
	c.Shell = shell
	return c
}

// testShells: the shells of one sandbox (Call.Shell, one per thread of a multi-agent session) keep their own
// cwd and variables over one filesystem; a command blocked in one does not block another, while a second call
// to the same shell waits for the first; and a sandbox runs at most sandbox.MaxShells of them.
func testShells(t *testing.T, newProvider func(testing.TB) sandbox.Provider) {
	p := newPool(t, newProvider, 0)
	const s = "shells"
	ws := mustRun(t, p, bash(s, "pwd"))

	// Separate state, one filesystem.
	mustRun(t, p, inShell("A", bash(s, "echo from-a > shared.txt && cd /tmp && export X=1")))
	if got := mustRun(t, p, inShell("A", bash(s, `pwd; echo "[$X]"`))); got != "/tmp\n[1]" {
		t.Errorf("shell A: %q, want its own cwd and variable", got)
	}
	if got, want := mustRun(t, p, inShell("B", bash(s, `pwd; echo "[$X]"; cat shared.txt`))), ws+"\n[]\nfrom-a"; got != want {
		t.Errorf("shell B: %q, want %q (its own cwd and variables, A's file)", got, want)
	}
	if got := mustRun(t, p, bash(s, `pwd; echo "[$X]"`)); got != ws+"\n[]" {
		t.Errorf("the default shell: %q", got)
	}
	mustRun(t, p, inShell("B", bash(s, "export KEEP=b")))
	if got := mustRun(t, p, inShell("A", call(s, "bash", map[string]any{"restart": true}))); !strings.Contains(got, "restarted") {
		t.Errorf("restart A: %q", got)
	}
	if got := mustRun(t, p, inShell("B", bash(s, `echo "[$KEEP]"`))); got != "[b]" {
		t.Errorf("shell B after A's restart: %q", got)
	}

	// A blocks until B releases it: every answer of B's below comes while A runs (should B wait for A, its
	// first call would end at the test's deadline, 60 s, before A's timeout, 120 s).
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type answer struct {
		out string
		err error
	}
	async := func(ctx context.Context, c *sandbox.Call) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			res, err := p.Execute(ctx, c)
			if err == nil && res.IsError {
				err = fmt.Errorf("error result: %s", res.Text())
			}
			ch <- answer{res.Text(), err}
		}()
		return ch
	}
	run := func(shell, command string) string {
		t.Helper()
		res, err := p.Execute(ctx, inShell(shell, bash(s, command)))
		if err != nil || res.IsError {
			t.Fatalf("shell %s: %q: %v %s", shell, command, err, res.Text())
		}
		return res.Text()
	}
	first := async(ctx, inShell("A", call(s, "bash", map[string]any{
		"command": "touch started; while [ ! -e release ]; do sleep 0.05; done; echo A done", "timeout_ms": 120000})))
	for run("B", "test -e started && echo yes || echo no") != "yes" {
		select {
		case a := <-first:
			t.Fatalf("A ended before it was released: %+v", a)
		case <-time.After(20 * time.Millisecond):
		}
	}
	second := async(ctx, inShell("A", bash(s, "ls release && echo A again")))
	if got := run("B", "echo B answers"); got != "B answers" {
		t.Errorf("shell B while A runs: %q", got)
	}
	select {
	case a := <-first:
		t.Fatalf("A ended before it was released: %+v", a)
	case a := <-second:
		t.Fatalf("the second call to A ran beside the first: %+v", a)
	default:
	}
	run("B", "touch release")
	if a := <-first; a.err != nil || a.out != "A done" {
		t.Errorf("A: %+v", a)
	}
	// The second call to A waited for the first: it saw the release.
	if a := <-second; a.err != nil || a.out != "release\nA again" {
		t.Errorf("the second call to A: %+v", a)
	}

	// The bound: the default shell, A and B run; fill up to MaxShells (starting the shells at once, as
	// concurrent threads would; with no deadline but the commands' own, for a loaded gVisor starts each shell in
	// seconds), then one more is refused.
	fill := make([]<-chan answer, sandbox.MaxShells-3)
	for i := range fill {
		fill[i] = async(context.Background(), inShell(fmt.Sprintf("sthr_%02d", i), bash(s, "echo ok")))
	}
	for i, ch := range fill {
		if a := <-ch; a.err != nil || a.out != "ok" {
			t.Fatalf("shell %d: %+v", i, a)
		}
	}
	if got := mustFail(t, p, inShell("sthr_more", bash(s, "echo ran"))); !strings.Contains(got, fmt.Sprintf("already runs %d shells", sandbox.MaxShells)) {
		t.Errorf("shell %d: %q, want the limit's error", sandbox.MaxShells+1, got)
	}
	if got := mustRun(t, p, inShell("B", bash(s, `echo "[$KEEP]"`))); got != "[b]" {
		t.Errorf("shell B at the bound: %q", got)
	}
	// A restart with no command ends a shell and makes room.
	mustRun(t, p, inShell("A", call(s, "bash", map[string]any{"restart": true})))
	if got := mustRun(t, p, inShell("sthr_more", bash(s, "echo ran"))); got != "ran" {
		t.Errorf("a new shell after one ended: %q", got)
	}
	if got := mustFail(t, p, inShell("../x", bash(s, "echo ran"))); !strings.Contains(got, "invalid shell name") {
		t.Errorf("an invalid shell name: %q", got)
	}
}
