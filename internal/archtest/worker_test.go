package archtest

import (
	"slices"
	"strings"
	"testing"
)

// fencedFromWorker are the packages the self-hosted worker must never link, directly or through another
// package: the store (it reaches the server through the HTTP API only) and the vault (it sees no credential).
var fencedFromWorker = []string{"internal/store", "internal/vault"}

// TestWorkerFence checks the transitive dependencies of internal/worker (go list -deps): no store, no vault,
// nor any of their subpackages. The worker links the workspace placer (it mounts the sessions' memory stores,
// over the API): the workspace must therefore not link them either, though its rules allow it the vault.
func TestWorkerFence(t *testing.T) {
	deps := goListDeps(t, "./internal/worker")
	// The fence guards a package that exists and runs tools in sandboxes: the list must say so.
	for _, want := range []string{"internal/worker", "internal/sandbox", "internal/client", "internal/workspace"} {
		if !slices.Contains(deps, module+want) {
			t.Fatalf("go list -deps ./internal/worker lacks %s: %v", want, deps)
		}
	}
	for _, dep := range deps {
		if msg := workerViolation(dep); msg != "" {
			t.Errorf("internal/worker links %s: %s", dep, msg)
		}
	}
}

// workerViolation says why the worker may not link pkg (an import path), or "".
func workerViolation(pkg string) string {
	rel, ok := strings.CutPrefix(pkg, module)
	if !ok {
		return ""
	}
	for _, f := range fencedFromWorker {
		if rel == f || strings.HasPrefix(rel, f+"/") {
			return "the worker imports neither store nor vault, not even through another package"
		}
	}
	return ""
}

func TestWorkerViolation(t *testing.T) {
	for pkg, bad := range map[string]bool{
		module + "internal/store": true, module + "internal/store/sqlite": true, module + "internal/vault": true,
		module + "internal/sandbox": false, module + "internal/client": false, module + "internal/storex": false,
		"github.com/other/internal/store": false,
	} {
		if got := workerViolation(pkg) != ""; got != bad {
			t.Errorf("workerViolation(%s) = %v, want %v", pkg, got, bad)
		}
	}
	// And the direct imports, as TestDependencyRule checks them.
	for _, c := range []struct {
		pkg, dep string
		ok       bool
	}{
		{"internal/worker", "internal/store", false},
		{"internal/worker", "internal/vault", false},
		{"internal/worker", "internal/sandbox/bwrap", false},
		{"internal/worker", "internal/client", true},
		{"internal/worker", "internal/sandbox", true},
		{"internal/server", "internal/worker", false},
		{"cmd/corral", "internal/worker", true},
	} {
		if got := violation(c.pkg, c.dep) == ""; got != c.ok {
			t.Errorf("violation(%s, %s) allowed=%v, want %v", c.pkg, c.dep, got, c.ok)
		}
	}
}
