package image_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/image"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
)

// TestGCSharedCache: one image cache shared by two servers, each with a store of its own. A layer only the
// first server's environments list survives the second server's garbage collection for as long as the first
// keeps marking it (KeepFor after its last pass), and goes once neither lists it; a layer nobody lists goes at
// once. No build runs: the layers are made by hand, as a build leaves them (a directory with its done file).
func TestGCSharedCache(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	open := func() store.Store {
		st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "corral.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	stA, stB := open(), open()
	service := func(st store.Store, keepFor time.Duration) *image.Service {
		svc, err := image.New(image.Config{Base: image.BaseConfig{Dir: dir}, Layer: image.LayerConfig{Agent: "/bin/true"},
			Store: st, GCInterval: -1, GCGrace: -1, KeepFor: keepFor})
		if err != nil {
			t.Fatal(err)
		}
		return svc
	}
	a, b := service(stA, time.Hour), service(stB, time.Hour)

	cfgA := apitype.EnvConfig{Type: apitype.EnvironmentCloud, Packages: &apitype.Packages{Apt: []string{"jq"}}}
	cfgNobody := apitype.EnvConfig{Type: apitype.EnvironmentCloud, Packages: &apitype.Packages{Pip: []string{"requests"}}}
	keyA, keyNobody := a.Key(&cfgA), a.Key(&cfgNobody)
	if keyA == keyNobody || b.Key(&cfgA) != keyA {
		t.Fatalf("keys: %s %s %s", keyA, keyNobody, b.Key(&cfgA))
	}
	for _, k := range []string{keyA, keyNobody} {
		if err := os.MkdirAll(image.LayerDir(dir, k), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(image.LayerDir(dir, k), "done"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := &apitype.Environment{Type: apitype.ObjectEnvironment, ID: apitype.NewID(apitype.PrefixEnvironment), Name: "a",
		Config: cfgA, Metadata: map[string]string{}, CreatedAt: apitype.Now(), UpdatedAt: apitype.Now()}
	if err := stA.EnvironmentCreate(ctx, env); err != nil {
		t.Fatal(err)
	}

	// Before the first server's pass nobody has marked its layer: B, which lists nothing, would take both. A's
	// pass marks its layer and takes the one nobody lists.
	if n, err := a.GC(ctx); err != nil || n != 1 || image.Built(dir, keyNobody) || !image.Built(dir, keyA) {
		t.Fatalf("A's pass: removed %d, %v; A's layer built %v, the other %v", n, err, image.Built(dir, keyA), image.Built(dir, keyNobody))
	}
	if n, err := b.GC(ctx); err != nil || n != 0 || !image.Built(dir, keyA) {
		t.Fatalf("B's pass removed %d (%v) of a layer A marked; still built: %v", n, err, image.Built(dir, keyA))
	}
	// A's mark older than B's KeepFor (A stopped long ago): B takes the layer.
	marks, _ := filepath.Glob(filepath.Join(dir, "images", keyA+".keep.*"))
	if len(marks) != 1 {
		t.Fatalf("A's marks: %v", marks)
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(marks[0], old, old); err != nil {
		t.Fatal(err)
	}
	if n, err := b.GC(ctx); err != nil || n != 1 || image.Built(dir, keyA) {
		t.Fatalf("B's pass after A's mark lapsed: removed %d, %v; still built: %v", n, err, image.Built(dir, keyA))
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "images", keyA+".keep.*")); len(left) != 0 {
		t.Errorf("marks left with the layer: %v", left)
	}

	// A layer A marked and then dropped (its environment deleted) is A's own to remove at its next pass.
	if err := os.MkdirAll(image.LayerDir(dir, keyA), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(image.LayerDir(dir, keyA), "done"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := a.GC(ctx); err != nil || n != 0 {
		t.Fatalf("A's pass with its layer listed: removed %d, %v", n, err)
	}
	if err := stA.EnvironmentDelete(ctx, env.ID); err != nil {
		t.Fatal(err)
	}
	if n, err := a.GC(ctx); err != nil || n != 1 || image.Built(dir, keyA) {
		t.Fatalf("A's pass after it dropped the layer: removed %d, %v; still built: %v", n, err, image.Built(dir, keyA))
	}
}
