package store_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/store"
)

// TestAdaptersMirror: the port declares each sub-interface of Store in the file named for it, and the adapters
// keep the methods of each in the file of the same name, so that the same concern is in the same place in each.
func TestAdaptersMirror(t *testing.T) {
	t.Parallel()
	files := map[reflect.Type]string{
		reflect.TypeFor[store.AgentStore]():          "agents.go",
		reflect.TypeFor[store.EnvironmentStore]():    "environments.go",
		reflect.TypeFor[store.SessionStore]():        "sessions.go",
		reflect.TypeFor[store.EventStore]():          "events.go",
		reflect.TypeFor[store.ThreadStore]():         "threads.go",
		reflect.TypeFor[store.LeaseStore]():          "leases.go",
		reflect.TypeFor[store.APIKeyStore]():         "apikeys.go",
		reflect.TypeFor[store.PreviewStore]():        "previews.go",
		reflect.TypeFor[store.VaultStore]():          "vaults.go",
		reflect.TypeFor[store.WorkStore]():           "work.go",
		reflect.TypeFor[store.EnvironmentKeyStore](): "environmentkeys.go",
		reflect.TypeFor[store.FileStore]():           "files.go",
		reflect.TypeFor[store.SkillStore]():          "skills.go",
		reflect.TypeFor[store.StatsStore]():          "stats.go",
		reflect.TypeFor[store.LeaderStore]():         "leader.go",
		reflect.TypeFor[store.MemoryStore]():         "memory.go",
		reflect.TypeFor[store.DreamStore]():          "dreams.go",
		reflect.TypeFor[store.WebhookStore]():        "webhooks.go",
		reflect.TypeFor[store.DeploymentStore]():     "deployments.go",
		reflect.TypeFor[store.TunnelStore]():         "tunnels.go",
		reflect.TypeFor[store.WorkspaceStore]():      "workspaces.go",
		reflect.TypeFor[store.RateStore]():           "rates.go",
		reflect.TypeFor[store.SlotStore]():           "slots.go",
	}
	// Every sub-interface embedded in Store has its file.
	st := reflect.TypeFor[store.Store]()
	covered := 0
	for typ := range files {
		if !st.Implements(typ) {
			t.Fatalf("store.Store does not embed %s", typ)
		}
		covered += typ.NumMethod()
	}
	if own := 2; covered+own != st.NumMethod() { // Capabilities and Close are the adapter's own
		t.Fatalf("the sub-interfaces cover %d of store.Store's %d methods: give the new one a file here", covered, st.NumMethod()-own)
	}

	t.Run("port", func(t *testing.T) {
		t.Parallel()
		declared := portTypes(t)
		for typ, file := range files {
			if got := declared[typ.Name()]; got != file {
				t.Errorf("store.%s is declared in %q, want %s", typ.Name(), got, file)
			}
		}
	})
	for _, dir := range []string{"sqlite", "postgres"} {
		t.Run(dir, func(t *testing.T) {
			t.Parallel()
			declared := storeMethods(t, dir)
			for typ, file := range files {
				for i := range typ.NumMethod() {
					name := typ.Method(i).Name
					if got := declared[name]; got != file {
						t.Errorf("%s.%s (%s) is in %q, want %s", dir, name, typ, got, file)
					}
				}
			}
		})
	}
}

// portTypes maps the types the port declares to the file of each.
func portTypes(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for path, f := range parseDir(t, ".") {
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, sp := range g.Specs {
					out[sp.(*ast.TypeSpec).Name.Name] = filepath.Base(path)
				}
			}
		}
	}
	return out
}

// parseDir parses the non-test Go files of dir, by path.
func parseDir(t *testing.T, dir string) map[string]*ast.File {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	fset := token.NewFileSet()
	out := map[string]*ast.File{}
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		out[path] = f
	}
	return out
}

// storeMethods maps the methods of *Store declared in the package in dir to the file of each.
func storeMethods(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for path, f := range parseDir(t, dir) {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) != 1 {
				continue
			}
			if star, ok := fn.Recv.List[0].Type.(*ast.StarExpr); ok {
				if id, ok := star.X.(*ast.Ident); ok && id.Name == "Store" {
					out[fn.Name.Name] = filepath.Base(path)
				}
			}
		}
	}
	return out
}
