package apitype_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestWireDiscriminatorsTyped: a wire struct's type discriminator (a field named Type, or tagged json:"type")
// has a vocabulary type of its own (vocab.go), not plain string, so that a value of one set cannot be used for
// another. A wire struct is an exported struct of this package that encoding/json encodes by its tags: it has
// a json tag and no MarshalJSON of its own (Event writes its JSON by hand; NewEvent is never encoded).
func TestWireDiscriminatorsTyped(t *testing.T) {
	t.Parallel()
	for _, f := range plainStringDiscriminators(t, ".") {
		t.Errorf("%s is a plain string: give its values a vocabulary type in vocab.go", f)
	}
}

// plainStringDiscriminators lists, as Type.Field, the discriminators of the wire structs in dir's non-test
// files whose type is string.
func plainStringDiscriminators(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	var files []*ast.File
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	marshalers := map[string]bool{}
	for _, f := range files {
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv != nil && fn.Name.Name == "MarshalJSON" {
				recv := fn.Recv.List[0].Type
				if st, ok := recv.(*ast.StarExpr); ok {
					recv = st.X
				}
				if id, ok := recv.(*ast.Ident); ok {
					marshalers[id.Name] = true
				}
			}
		}
	}
	var out []string
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok || !ts.Name.IsExported() || marshalers[ts.Name.Name] {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok || !hasJSONTag(st) {
				return true
			}
			for _, field := range st.Fields.List {
				id, ok := field.Type.(*ast.Ident)
				if !ok || id.Name != "string" {
					continue
				}
				for _, name := range field.Names {
					if name.Name == "Type" || jsonName(field) == "type" {
						out = append(out, ts.Name.Name+"."+name.Name)
					}
				}
			}
			return true
		})
	}
	if len(files) == 0 {
		t.Fatal("no files parsed")
	}
	slices.Sort(out)
	return out
}

func hasJSONTag(st *ast.StructType) bool {
	return slices.ContainsFunc(st.Fields.List, func(f *ast.Field) bool { return jsonName(f) != "" })
}

// jsonName is the name in a field's json tag, or "".
func jsonName(f *ast.Field) string {
	if f.Tag == nil {
		return ""
	}
	tag, err := strconv.Unquote(f.Tag.Value)
	if err != nil {
		return ""
	}
	name, _, _ := strings.Cut(reflect.StructTag(tag).Get("json"), ",")
	return name
}
