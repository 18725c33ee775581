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

// RunLimits checks that a fork bomb and a memory hog are contained in their sandbox and reported to the model,
// while the server and another session's sandbox stay healthy. Run it for every backend that enforces
// sandbox.Limits. A backend whose workspace goes with its sandbox (opts.EphemeralWorkspace) starts the next one
// with an empty workspace. Under gVisor (opts.NoHostProcesses) the kernel's OOM killer kills the whole sandbox, not one
// process in it, which must then be reported as the sandbox's death.
func RunLimits(t *testing.T, newProvider func(testing.TB) sandbox.Provider, opts Options) {
	limits := sandbox.Limits{Pids: 64, MemoryBytes: 128 << 20, CommandTimeout: 20 * time.Second}
	p := newPool(t, newProvider, 0)
	limited := func(c *sandbox.Call) *sandbox.Call { c.Recipe.Limits = limits; return c }
	pidsLimit := limits.Pids
	if opts.PidsLimit > 0 {
		pidsLimit = opts.PidsLimit
	}
	// A bystander, provisioned before the trouble starts.
	mustRun(t, p, limited(bash("bystander", "echo up")))

	t.Run("ForkBomb", func(t *testing.T) {
		mustRun(t, p, limited(call("bomb", "write", map[string]any{"file_path": "keep.txt", "content": "kept"})))
		start := time.Now()
		res, err := p.Execute(context.Background(), limited(bash("bomb", "b(){ b|b & }; b; sleep 60; echo survived")))
		if !errors.Is(err, sandbox.ErrSandboxDead) || !errors.Is(err, sandbox.ErrLimit) {
			t.Fatalf("fork bomb: err = %v (result %q), want ErrSandboxDead and ErrLimit", err, res.Text())
		}
		if got := res.Text(); !res.IsError || !strings.Contains(got, fmt.Sprintf("limit of %d processes", pidsLimit)) {
			t.Errorf("fork bomb result: %q", got)
		}
		// The bomb is stopped when it hits the limit, not when the command's timeout (20 s) ends.
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("fork bomb stopped only after %s", d)
		}
		t.Logf("fork bomb contained in %s: %s", time.Since(start), res.Text())
		if got := mustRun(t, p, limited(bash("bystander", "echo still up"))); got != "still up" {
			t.Errorf("bystander: %q", got)
		}
		// The next call gets a fresh sandbox, with the workspace unless it went with the sandbox.
		got := mustRun(t, p, limited(bash("bomb", "cat keep.txt 2>/dev/null || echo fresh; ls -d /proc/[0-9]* | wc -l")))
		want := "kept"
		if opts.EphemeralWorkspace {
			want = "fresh"
			t.Log("Options.EphemeralWorkspace: the new sandbox's workspace is a new one")
		}
		if !strings.HasPrefix(got, want) {
			t.Errorf("after fork bomb: %q, want %s", got, want)
		}
	})
	t.Run("MemoryHog", func(t *testing.T) {
		if opts.NoHostProcesses {
			res, err := p.Execute(context.Background(), limited(bash("hog", "tail /dev/zero; echo status $?")))
			if !errors.Is(err, sandbox.ErrSandboxDead) || !errors.Is(err, sandbox.ErrLimit) || !strings.Contains(res.Text(), "ran out of memory (limit 128 MiB)") {
				t.Fatalf("memory hog: %v %q", err, res.Text())
			}
			if got := mustRun(t, p, limited(bash("hog", "echo fresh"))); got != "fresh" {
				t.Errorf("after memory hog: %q", got)
			}
			return
		}
		res, err := p.Execute(context.Background(), limited(bash("hog", "tail /dev/zero; echo status $?")))
		got := res.Text()
		if err != nil || !res.IsError || res.Failure != sandbox.FailureLimit || !strings.Contains(got, "memory limit of 128 MiB") {
			t.Errorf("memory hog result: err %v, error result %v, failure %q: %q; want an error result, failure %q", err, res.IsError, res.Failure, got, sandbox.FailureLimit)
		}
		t.Logf("memory hog: %s", got)
		// The agent survived: the same sandbox keeps its shell state.
		mustRun(t, p, limited(bash("hog", "export KEPT=yes")))
		if got := mustRun(t, p, limited(bash("hog", "echo $KEPT"))); got != "yes" {
			t.Errorf("after memory hog: %q", got)
		}
		if got := mustRun(t, p, limited(bash("bystander", "echo still up"))); got != "still up" {
			t.Errorf("bystander: %q", got)
		}
	})
}
