package archtest

import (
	"slices"
	"strings"
	"testing"
)

// inSandbox are the packages whose code runs inside a sandbox: the agent binary and what it is built from.
var inSandbox = []string{"./cmd/corral-sandbox-agent", "./internal/sandbox/agent", "./internal/sandbox/seccomp"}

// TestAgentLinksNoPoolNorHostKit: nothing that runs inside a sandbox links the host kit (internal/sandbox/host:
// uids, mounts, the egress listener, the agent's client), nor the sandbox port with its Pool, nor the host-side
// pieces (cgroups, the egress proxy), not even through another package. TestDependencyRule checks direct
// imports; this checks the transitive ones.
func TestAgentLinksNoPoolNorHostKit(t *testing.T) {
	banned := []string{"internal/sandbox/host", "internal/sandbox", "internal/sandbox/cgroup", "internal/sandbox/egress"}
	for _, pkg := range inSandbox {
		d := goListDeps(t, pkg)
		if !slices.Contains(d, module+strings.TrimPrefix(pkg, "./")) {
			t.Fatalf("go list -deps %s does not list the package itself; is it run in the module? %v", pkg, d)
		}
		for _, b := range banned {
			if slices.Contains(d, module+b) {
				t.Errorf("%s links %s: nothing inside a sandbox may", pkg, b)
			}
		}
	}
	// The check can fail: the server's binary links them all.
	d := goListDeps(t, "./cmd/corral")
	for _, b := range banned {
		if !slices.Contains(d, module+b) {
			t.Errorf("cmd/corral does not link %s: the check above proves nothing", b)
		}
	}
}
