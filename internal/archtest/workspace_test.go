package archtest

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestSandboxLinksNoWorkspace: the in-sandbox agent's binary and the sandbox backends do not link the workspace
// placer, not even through another package: the code that clones repositories (and next handles their
// credentials) stays in the server. TestDependencyRule checks direct imports; this checks the transitive ones.
func TestSandboxLinksNoWorkspace(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("go is not on PATH: %v", err)
	}
	pkgs := []string{"./cmd/corral-sandbox-agent", "./internal/sandbox", "./internal/sandbox/agent",
		"./internal/sandbox/bwrap", "./internal/sandbox/oci", "./internal/sandbox/gvisor", "./internal/sandbox/process"}
	for _, pkg := range pkgs {
		cmd := exec.Command("go", "list", "-deps", pkg)
		cmd.Dir = "../.."
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		deps := strings.Fields(string(out))
		if !slices.Contains(deps, module+"internal/apitype") {
			t.Fatalf("go list -deps %s lists no internal/apitype; is it run in the module? %v", pkg, deps)
		}
		if slices.Contains(deps, module+"internal/workspace") {
			t.Errorf("%s links internal/workspace", pkg)
		}
	}
	// The check can fail: the composition root does link it.
	out, err := exec.Command("go", "list", "-deps", "../../cmd/corral").Output()
	if err != nil {
		t.Fatalf("go list -deps cmd/corral: %v", err)
	}
	if !slices.Contains(strings.Fields(string(out)), module+"internal/workspace") {
		t.Error("cmd/corral does not link internal/workspace: the check above proves nothing")
	}
}
