// Package archtest enforces the dependency rule of docs/architecture.md: imports point down toward apitype,
// adapters import only their port, api and harness never import each other, and only cmd/ picks backends.
package archtest

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/corralhq/corral/"

// ports are the packages whose subpackages are adapters (or kits for testing them).
var ports = []string{"internal/store", "internal/model", "internal/sandbox"}

// rules lists, per package, the internal packages it may import (non-test files). A package not listed may
// import what the general rules allow.
var rules = map[string][]string{
	"internal/apitype":  {},
	"internal/store":    {"internal/apitype"},
	"internal/model":    {"internal/apitype"},
	"internal/sandbox":  {"internal/apitype"},
	"internal/client":   {"internal/apitype"},
	"internal/api":      {"internal/apitype", "internal/store"},
	"internal/harness":  {"internal/apitype", "internal/store", "internal/model", "internal/sandbox"},
	"internal/archtest": {},
	// The workspace placer implements the sandbox port's Placer; the composition root hands it the egress
	// rules (Resolve), so it needs no backend and no sandbox subpackage.
	"internal/workspace": {"internal/apitype", "internal/sandbox", "internal/vault"},
	// The model test kit wraps the fake model server that corral bench links too.
	"internal/model/modeltest": {"internal/apitype", "internal/model", "internal/model/fakemodel"},
	"internal/vault":           {"internal/apitype", "internal/store"},
	// The proxies use the vault's secrets outside every sandbox; the git endpoint checks destinations with
	// the egress proxy's rules.
	"internal/proxy": {"internal/apitype", "internal/sandbox", "internal/sandbox/egress", "internal/store", "internal/vault"},
	// The proxy test kit wires a real store, vault, git endpoint and workspace for the sandbox suites.
	"internal/proxy/proxytest": {"internal/apitype", "internal/proxy", "internal/sandbox", "internal/sandbox/sandboxtest",
		"internal/store", "internal/store/sqlite", "internal/vault", "internal/workspace"},
}

// vaultImporters are the only packages besides cmd/ that may import internal/vault, the one that sees
// plaintext secrets: the proxies that inject them and the workspace that clones with them. The API only seals,
// through an interface it is given.
var vaultImporters = []string{"internal/proxy", "internal/workspace"}

func TestDependencyRule(t *testing.T) {
	root := filepath.Join("..", "..")
	imports := map[string][]string{} // package dir -> internal imports (non-test files)
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == "testdata" || (strings.HasPrefix(name, ".") && path != root) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p := strings.Trim(imp.Path.Value, `"`)
			if dep, ok := strings.CutPrefix(p, module); ok && !slices.Contains(imports[rel], dep) {
				imports[rel] = append(imports[rel], dep)
			}
		}
		if _, ok := imports[rel]; !ok {
			imports[rel] = nil
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(imports) < 5 {
		t.Fatalf("found only %d packages; is the walk rooted right?", len(imports))
	}
	for pkg, deps := range imports {
		for _, dep := range deps {
			if msg := violation(pkg, dep); msg != "" {
				t.Errorf("%s imports %s: %s", pkg, dep, msg)
			}
		}
	}
}

// violation says why pkg may not import dep, or "" if it may.
func violation(pkg, dep string) string {
	if strings.HasPrefix(pkg, "cmd/") {
		return "" // the composition root knows every backend
	}
	if dep == "internal/workspace" && (pkg == "internal/sandbox" || portOf(pkg) == "internal/sandbox") {
		return "the sandbox port, its backends and the in-sandbox agent never import the workspace placer (no git or credential code in a sandbox)"
	}
	if dep == "internal/vault" && !slices.Contains(vaultImporters, pkg) && !strings.HasPrefix(pkg, "internal/proxy/") {
		return "only the proxies and the workspace may import the vault (it opens secrets)"
	}
	if allowed, ok := rules[pkg]; ok {
		if !slices.Contains(allowed, dep) {
			return "not in its allowed imports " + strings.Join(allowed, ", ")
		}
		return ""
	}
	if port := portOf(pkg); port != "" {
		// An adapter (or a kit testing a port) imports its port, apitype, and its own subpackages only.
		if dep == port || dep == "internal/apitype" || strings.HasPrefix(dep, pkg+"/") || portOf(dep) == port && isShared(dep) {
			return ""
		}
		return "an adapter may import only its port (" + port + "), apitype and its own subpackages"
	}
	if portOf(dep) != "" && !isShared(dep) {
		return "only cmd/ may pick a backend"
	}
	if dep == "internal/worker" || (pkg == "internal/worker" && (dep == "internal/store" || dep == "internal/vault")) {
		return "the worker imports neither store nor vault"
	}
	return ""
}

// portOf returns the port a package is an adapter of, or "".
func portOf(pkg string) string {
	for _, p := range ports {
		if strings.HasPrefix(pkg, p+"/") {
			return p
		}
	}
	return ""
}

// isShared reports whether a port subpackage is shared by its adapters rather than an adapter itself: the
// in-sandbox agent and the host-side pieces every isolating sandbox backend uses (cgroup limits, the egress
// proxy), and the OCI bundle code that the gVisor backend (an OCI runtime) builds on.
func isShared(pkg string) bool {
	switch pkg {
	case "internal/sandbox/agent", "internal/sandbox/cgroup", "internal/sandbox/egress", "internal/sandbox/oci":
		return true
	}
	return false
}

func TestViolation(t *testing.T) {
	cases := []struct {
		pkg, dep string
		ok       bool
	}{
		{"internal/api", "internal/harness", false},
		{"internal/harness", "internal/api", false},
		{"internal/api", "internal/store/sqlite", false},
		{"internal/store/sqlite", "internal/store", true},
		{"internal/store/sqlite", "internal/store/postgres", false},
		{"internal/store/sqlite", "internal/model", false},
		{"internal/sandbox/bwrap", "internal/sandbox/agent", true},
		{"internal/sandbox/gvisor", "internal/sandbox/oci", true},
		{"internal/sandbox/bwrap", "internal/sandbox/process", false},
		{"internal/apitype", "internal/store", false},
		{"internal/store", "internal/api", false},
		{"cmd/corral", "internal/store/sqlite", true},
		{"cmd/corral", "internal/workspace", true},
		{"internal/workspace", "internal/sandbox", true},
		{"internal/workspace", "internal/apitype", true},
		{"internal/workspace", "internal/sandbox/egress", false},
		{"internal/workspace", "internal/sandbox/bwrap", false},
		{"internal/workspace", "internal/store", false},
		{"internal/sandbox", "internal/workspace", false},
		{"internal/sandbox/agent", "internal/workspace", false},
		{"internal/sandbox/bwrap", "internal/workspace", false},
		{"internal/sandbox/oci", "internal/workspace", false},
		{"internal/sandbox/gvisor", "internal/workspace", false},
		{"internal/sandbox/process", "internal/workspace", false},
		{"internal/sandbox/sandboxtest", "internal/workspace", false},
		{"cmd/corral", "internal/vault", true},
		{"internal/api", "internal/vault", false},
		{"internal/harness", "internal/vault", false},
		{"internal/sandbox/bwrap", "internal/vault", false},
		{"internal/bench", "internal/vault", false},
		{"internal/proxy", "internal/vault", true},
		{"internal/proxy", "internal/sandbox/egress", true},
		{"internal/proxy", "internal/sandbox/bwrap", false},
		{"internal/proxy", "internal/store/sqlite", false},
		{"internal/proxy", "internal/workspace", false},
		{"internal/proxy/proxytest", "internal/sandbox/sandboxtest", true},
		{"internal/proxy/proxytest", "internal/sandbox/bwrap", false},
		{"internal/workspace", "internal/vault", true},
		{"internal/vault", "internal/store", true},
		{"internal/vault", "internal/api", false},
	}
	for _, c := range cases {
		if got := violation(c.pkg, c.dep) == ""; got != c.ok {
			t.Errorf("violation(%s, %s) allowed=%v, want %v", c.pkg, c.dep, got, c.ok)
		}
	}
}
