package agent

import (
	"context"
	"encoding/json"
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
