package archtest

import (
	"slices"
	"testing"
)

// TestBrainLinksNoVault: the brain (internal/harness) and the MCP port it calls do not link internal/vault,
// not even through another package. The brain reaches MCP servers only through the MCP proxy (internal/proxy,
// given by cmd/ as an mcp.Client), which picks and opens the credentials: a brain never holds a token.
// TestDependencyRule checks direct imports; this checks the transitive ones.
func TestBrainLinksNoVault(t *testing.T) {
	for _, pkg := range []string{"./internal/harness", "./internal/mcp", "./internal/mcp/remote"} {
		d := goListDeps(t, pkg)
		if !slices.Contains(d, module+"internal/apitype") {
			t.Fatalf("go list -deps %s lists no internal/apitype; is it run in the module? %v", pkg, d)
		}
		for _, banned := range []string{"internal/vault", "internal/proxy"} {
			if slices.Contains(d, module+banned) {
				t.Errorf("%s links %s: the brain must never hold a credential", pkg, banned)
			}
		}
	}
	// The check can fail: the MCP proxy does link the vault.
	if !slices.Contains(goListDeps(t, "./internal/proxy"), module+"internal/vault") {
		t.Error("internal/proxy does not link internal/vault: the check above proves nothing")
	}
}
