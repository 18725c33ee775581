// Package archtest enforces the dependency rule of docs/architecture.md: imports point down toward apitype,
// adapters import only their port, api and harness never import each other, and only cmd/ picks backends.
package archtest

import (
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/corralhq/corral/"

// ports are the packages whose subpackages are adapters (or kits for testing them).
var ports = []string{"internal/store", "internal/model", "internal/sandbox", "internal/blob"}

// rules lists, per package, the internal packages it may import (non-test files). A package not listed may
// import what the general rules allow.
var rules = map[string][]string{
	"internal/apitype": {},
	"internal/store":   {"internal/apitype"},
	"internal/model":   {"internal/apitype"},
	"internal/sandbox": {"internal/apitype"},
	"internal/blob":    {},
	"internal/client":  {"internal/apitype"},
	"internal/api":     {"internal/apitype", "internal/store", "internal/files", "internal/skills", "internal/price", "internal/cron", "internal/webhook"},
	"internal/mcp":     {"internal/apitype"},
	// The MCP port over HTTP, for brains whose MCP proxy is `corral proxy`: no credential code.
	"internal/mcp/remote": {"internal/apitype", "internal/mcp"},
	// Checks and packs skills' files: stdlib only.
	"internal/skills": {},
	// The Files API's storage: metadata in the store, bytes in the blob port.
	"internal/files":   {"internal/apitype", "internal/store", "internal/blob"},
	"internal/harness": {"internal/apitype", "internal/store", "internal/model", "internal/sandbox", "internal/mcp", "internal/price", "internal/webfetch", "internal/websearch"},
	"internal/price":   {},
	// Deployment schedules: cron expressions in a timezone, stdlib only.
	"internal/cron": {},
	// The web_fetch port: what the brain asks and gets, no network code.
	"internal/webfetch": {"internal/apitype"},
	// Its adapter fetches from the brain's process under the egress rules of the sandboxes' proxy.
	"internal/webfetch/httpfetch": {"internal/webfetch", "internal/sandbox/egress"},
	// The web_search port: queries, results and their domain rules, no network code.
	"internal/websearch": {"internal/apitype"},
	// Its SearXNG adapter, under the same egress rules.
	"internal/websearch/searxng": {"internal/apitype", "internal/websearch", "internal/sandbox/egress"},
	"internal/server": {"internal/apitype", "internal/store", "internal/api", "internal/harness", "internal/sandbox", "internal/files",
		"internal/metrics", "internal/console", "internal/maintain", "internal/price", "internal/webhook", "internal/tunnel"},
	// MCP tunnels: the connector and the hub of connectors, over the store port; no credential, no vault.
	"internal/tunnel": {"internal/apitype", "internal/store"},
	// Periodic jobs under the store's leader lease: the store port, nothing else.
	"internal/maintain": {"internal/store"},
	// The console serves its embedded files; its pages reach the server through the public HTTP API only.
	"internal/console": {},
	// The one package that speaks Prometheus: it implements the Metrics interfaces of harness and api, which
	// import neither it nor the client library.
	"internal/metrics": {},
	// The benchmark composes servers through internal/server and is handed its backends by cmd/: it picks none.
	"internal/bench": {"internal/apitype", "internal/store", "internal/api", "internal/harness", "internal/model",
		"internal/sandbox", "internal/server", "internal/model/fakemodel", "internal/client", "internal/webhook"},
	"internal/archtest": {},
	// The in-sandbox agent runs inside every sandbox: it links neither the sandbox port (the pool) nor the host
	// kit, only the seccomp deny list its shell launcher installs (TestAgentLinksNoPoolNorHostKit).
	"internal/sandbox/agent": {"internal/apitype", "internal/sandbox/seccomp"},
	// The workspace placer implements the sandbox port's Placer; the composition root hands it the egress
	// rules (Resolve), so it needs no backend and no sandbox subpackage.
	"internal/workspace": {"internal/apitype", "internal/sandbox", "internal/vault", "internal/skills"},
	// The model test kit wraps the fake model server that corral bench links too.
	"internal/model/modeltest": {"internal/apitype", "internal/model", "internal/model/fakemodel"},
	"internal/vault":           {"internal/apitype", "internal/store"},
	// The proxies use the vault's secrets outside every sandbox; the git endpoint checks destinations with
	// the egress proxy's rules.
	"internal/proxy": {"internal/apitype", "internal/sandbox", "internal/sandbox/egress", "internal/store", "internal/vault", "internal/mcp",
		"internal/tunnel"},
	// Webhook deliveries reach their endpoints under the egress rules of the proxies; the dispatcher that
	// picks them is elsewhere: no store, api or harness.
	"internal/webhook": {"internal/apitype", "internal/sandbox/egress", "internal/store"},
	// The proxy test kit wires a real store, vault, git endpoint, credential injection and workspace for the
	// sandbox suites.
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
// in-sandbox agent, the host kit and the host-side pieces every isolating sandbox backend uses (cgroup limits,
// the egress proxy, the seccomp deny list, the workspace volumes with their disk quotas), and the OCI bundle
// code that the gVisor backend (an OCI runtime) builds on.
func isShared(pkg string) bool {
	switch pkg {
	case "internal/sandbox/agent", "internal/sandbox/host", "internal/sandbox/cgroup", "internal/sandbox/egress", "internal/sandbox/oci",
		"internal/sandbox/seccomp", "internal/sandbox/volume":
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
		{"internal/sandbox/bwrap", "internal/sandbox/host", true},
		{"internal/sandbox/host", "internal/sandbox/agent", true},
		{"internal/sandbox/agent", "internal/sandbox/host", false},
		{"internal/sandbox/agent", "internal/sandbox", false},
		{"internal/sandbox/agent", "internal/sandbox/seccomp", true},
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
		{"internal/server", "internal/api", true},
		{"internal/server", "internal/sandbox/bwrap", false},
		{"internal/server", "internal/store/sqlite", false},
		{"internal/bench", "internal/server", true},
		{"internal/bench", "internal/sandbox/gvisor", false},
		{"internal/bench", "internal/model/anthropic", false},
		{"internal/blob/s3", "internal/blob", true},
		{"internal/blob/s3", "internal/apitype", true},
		{"internal/blob/s3", "internal/blob/localfs", false},
		{"internal/blob/s3", "internal/store", false},
		{"internal/blob/s3", "internal/files", false},
		{"internal/files", "internal/blob/s3", false},
		{"internal/server", "internal/blob/s3", false},
		{"cmd/corral", "internal/blob/s3", true},

		{"internal/webhook", "internal/sandbox/egress", true},
		{"internal/webhook", "internal/store", true},
		{"internal/webhook", "internal/api", false},
		{"internal/webhook", "internal/harness", false},
		{"internal/webhook", "internal/sandbox/bwrap", false},

		{"internal/server", "internal/metrics", true},
		{"internal/harness", "internal/metrics", false},
		{"internal/api", "internal/metrics", false},
		{"internal/sandbox", "internal/metrics", false},
		{"internal/metrics", "internal/harness", false},
	}
	for _, c := range cases {
		if got := violation(c.pkg, c.dep) == ""; got != c.ok {
			t.Errorf("violation(%s, %s) allowed=%v, want %v", c.pkg, c.dep, got, c.ok)
		}
	}
}

// shipped are the binaries users run: no test kit may be linked into them.
var shipped = []string{"./cmd/corral", "./cmd/corral-sandbox-agent"}

// TestShippedDeps checks the transitive dependencies of each shipped binary (go list -deps): no testing, no
// net/http/httptest, no package of this module named like a test kit (*test).
func TestShippedDeps(t *testing.T) {
	for _, bin := range shipped {
		deps := goListDeps(t, bin)
		if !slices.Contains(deps, module+strings.TrimPrefix(bin, "./")) || len(deps) < 20 {
			t.Fatalf("go list -deps %s listed only %d packages: %v", bin, len(deps), deps)
		}
		for _, dep := range deps {
			if msg := shippedViolation(dep); msg != "" {
				t.Errorf("%s links %s: %s", bin, dep, msg)
			}
		}
	}
}

// goListDeps returns the packages pkg links, directly or through another package (go list -deps, run at the
// module's root). The transitive fences (the shipped binaries, the worker, the brain, the in-sandbox agent) read
// it; TestDependencyRule checks direct imports.
func goListDeps(t *testing.T, pkg string) []string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go is not on PATH, so the dependencies of %s cannot be listed: %v", pkg, err)
	}
	cmd := exec.Command(goBin, "list", "-deps", pkg)
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr)
	}
	return strings.Fields(string(out))
}

// shippedViolation says why a shipped binary may not link pkg, or "" if it may.
func shippedViolation(pkg string) string {
	if pkg == "testing" || strings.HasPrefix(pkg, "testing/") || pkg == "net/http/httptest" {
		return "a test package in a shipped binary"
	}
	if rel, ok := strings.CutPrefix(pkg, module); ok && strings.HasSuffix(rel, "test") {
		return "a test kit of this module in a shipped binary"
	}
	return ""
}

func TestShippedViolation(t *testing.T) {
	for pkg, bad := range map[string]bool{
		"testing": true, "testing/fstest": true, "net/http/httptest": true, "net/http": false,
		module + "internal/model/modeltest": true, module + "internal/store/storetest": true,
		module + "internal/store/postgres/pgtest": true, module + "internal/model/fakemodel": false,
		module + "internal/bench": false, "github.com/other/latest": false,
	} {
		if got := shippedViolation(pkg) != ""; got != bad {
			t.Errorf("shippedViolation(%s) = %v, want %v", pkg, got, bad)
		}
	}
}

// confined lists third-party modules that only some packages may import: the S3 client stays behind the blob
// port's S3 adapter (and its test kit, which creates the test bucket).
var confined = map[string][]string{"github.com/minio/": {"internal/blob/s3", "internal/blob/s3/s3test"}}

func TestConfinedImports(t *testing.T) {
	root := filepath.Join("..", "..")
	found := 0
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
		if !strings.HasSuffix(path, ".go") {
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
			for prefix, owners := range confined {
				if !strings.HasPrefix(p, prefix) {
					continue
				}
				found++
				if !slices.Contains(owners, rel) {
					t.Errorf("%s imports %s: only %s may", path, p, strings.Join(owners, ", "))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("no package imports the confined modules; is the walk rooted right?")
	}
}
