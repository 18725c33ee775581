package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// envReaders are the non-test files outside cmd/ allowed to read the process environment, and why. Everything
// else gets its settings through its Config, filled in by cmd/ (docs/architecture.md).
var envReaders = map[string]string{
	// Test kits: they read the test's settings (CORRAL_TEST_POSTGRES, CI, the backends a run requires).
	"internal/store/postgres/pgtest/pgtest.go":         "test kit",
	"internal/store/storetest/crash.go":                "test kit (the crash child's settings)",
	"internal/sandbox/sandboxtest/sandboxtest.go":      "test kit",
	"internal/sandbox/sandboxtest/gitrepo.go":          "test kit",
	"internal/sandbox/sandboxtest/gitserver.go":        "test kit",
	"internal/blob/s3/s3test/s3test.go":                "test kit",
	"internal/image/imagetest/imagetest.go":            "test kit",
	"internal/sandbox/kubernetes/kubetest/kubetest.go": "test kit",
	"internal/sandbox/kubernetes/kubetest/image.go":    "test kit",
	"internal/sandbox/agent/main.go":                   "the in-sandbox agent's main: its environment is the sandbox's",
}

// TestOnlyCmdReadsEnv: outside cmd/, no non-test file calls os.Getenv, os.LookupEnv or os.Environ unless it is
// listed in envReaders.
func TestOnlyCmdReadsEnv(t *testing.T) {
	root := filepath.Join("..", "..")
	found := 0
	read := map[string]bool{} // files that read the environment
	err := filepath.WalkDir(filepath.Join(root, "internal"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		found++
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "os" && (sel.Sel.Name == "Getenv" || sel.Sel.Name == "LookupEnv" || sel.Sel.Name == "Environ") {
				read[rel] = true
				if _, ok := envReaders[rel]; !ok {
					t.Errorf("%s: os.%s outside cmd/: take the setting from the component's Config", fset.Position(sel.Pos()), sel.Sel.Name)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 20 {
		t.Fatalf("parsed only %d files; is the walk rooted right?", found)
	}
	for file := range envReaders {
		if !read[file] {
			t.Errorf("envReaders lists %s, which reads no environment (or is gone): drop it from the list", file)
		}
	}
}
