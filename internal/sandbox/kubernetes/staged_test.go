package kubernetes_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/kubernetes/kubetest"
)

// onceStager places fixed files in a session's staging copy, once, as the Placer places each resource once.
type onceStager struct{ once sync.Once }

func (s *onceStager) Place(_ context.Context, _ *sandbox.Recipe, host sandbox.HostDirs) []*sandbox.ResourceError {
	s.once.Do(func() {
		for name, content := range map[string]string{
			filepath.Join(host.Workspace, "repo", "README"):            "placed",
			filepath.Join(host.Uploads(), "in.txt"):                    "upload",
			filepath.Join(host.Skills(), "s", "SKILL.md"):              "skill",
			filepath.Join(host.Memory(), "notes", "a.md"):              "memory a",
			filepath.Join(host.Memory(), "style", "rules", "brief.md"): "be brief",
		} {
			if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				panic(err)
			}
			if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
				panic(err)
			}
		}
	})
	return nil
}

func (s *onceStager) Forget(string) error { return nil }

// snapshots records the staging copy's outputs and memory stores as each collection finds them.
type snapshots struct {
	mu   sync.Mutex
	last map[string]string
	n    int
}

func (c *snapshots) Collect(_ context.Context, _ *sandbox.Recipe, host sandbox.HostDirs) error {
	got := map[string]string{}
	for _, dir := range []string{host.Outputs(), host.Memory()} {
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				b, _ := os.ReadFile(p)
				rel, _ := filepath.Rel(host.Session, p)
				got[rel] = string(b)
			}
			return err
		})
	}
	c.mu.Lock()
	c.last, c.n = got, c.n+1
	c.mu.Unlock()
	return nil
}

// TestSessionFiles: a session's files, placed in the staging copy on this host, are in its pod: the workspace's,
// the uploads and skills (without write permission), the memory stores (a read_only one without write
// permission); what the agent writes in the outputs and a read_write store, and deletes there, is copied back
// before the collection; a resource already in the workspace's claim is left as the agent left it when the
// next pod starts, which gets the outputs and stores as they were copied back.
func TestSessionFiles(t *testing.T) {
	ctx := context.Background()
	cfg := config(t)
	cfg.WorkspaceClass = kubetest.StorageClass
	col := &snapshots{}
	pool, err := sandbox.NewPool(sandbox.PoolConfig{Provider: newProviderWith(t, cfg), WorkspaceRoot: t.TempDir(),
		Placer: &onceStager{}, Outputs: col})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Stop() })
	recipe := sandbox.Recipe{SessionID: "sesn_files_" + cfg.Owner, Resources: []apitype.Resource{
		{ID: "sesrsc_repo", Type: apitype.ResourceGitHubRepository, URL: "https://example.com/o/repo.git"},
		{ID: "sesrsc_notes", Type: apitype.ResourceMemoryStore, MemoryStoreID: "memstore_notes", Name: "notes", Access: apitype.AccessReadWrite},
		{ID: "sesrsc_style", Type: apitype.ResourceMemoryStore, MemoryStoreID: "memstore_style", Name: "style", Access: apitype.AccessReadOnly},
	}}
	run := func(cmd string) string {
		t.Helper()
		in, _ := json.Marshal(map[string]string{"command": cmd})
		res, err := pool.Execute(ctx, &sandbox.Call{Recipe: recipe, Name: "bash", Input: in})
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %q", cmd, err, res.Text())
		}
		return strings.TrimSpace(res.Text())
	}
	writable := func(path string) string {
		return "(echo x >> " + path + ") 2>/dev/null && echo " + path + " writable || echo " + path + " read-only; "
	}
	got := run("cat /workspace/repo/README /mnt/session/uploads/in.txt /mnt/skills/s/SKILL.md /mnt/memory/notes/a.md " +
		"/mnt/memory/style/rules/brief.md; echo; " +
		writable("/mnt/session/uploads/in.txt") + writable("/mnt/session/uploads/new") + writable("/mnt/skills/s/new") +
		writable("/mnt/memory/style/rules/brief.md") + writable("/mnt/memory/style/new") +
		"echo edited > /workspace/repo/README && echo out > /mnt/session/outputs/o.txt && " +
		"rm /mnt/memory/notes/a.md && mkdir /mnt/memory/notes/d && echo b > /mnt/memory/notes/d/b.md && echo done")
	want := "placedupload" + "skill" + "memory a" + "be brief\n" +
		"/mnt/session/uploads/in.txt read-only\n/mnt/session/uploads/new read-only\n/mnt/skills/s/new read-only\n" +
		"/mnt/memory/style/rules/brief.md read-only\n/mnt/memory/style/new read-only\ndone"
	if got != want {
		t.Fatalf("in the pod:\n%s\nwant:\n%s", got, want)
	}

	if err := pool.CollectOutputs(ctx, &recipe); err != nil {
		t.Fatal(err)
	}
	col.mu.Lock()
	snap, n := col.last, col.n
	col.mu.Unlock()
	wantSnap := map[string]string{"outputs/o.txt": "out\n", "memory/notes/d/b.md": "b\n", "memory/style/rules/brief.md": "be brief"}
	if n != 1 || len(snap) != len(wantSnap) {
		t.Errorf("collection %d saw %v, want %v", n, snap, wantSnap)
	}
	for k, v := range wantSnap {
		if snap[k] != v {
			t.Errorf("collected %s: %q, want %q", k, snap[k], v)
		}
	}

	// The pod goes; the next one mounts the claim, where the repository stays as the agent left it.
	if err := pool.Close(recipe.SessionID); err != nil {
		t.Fatal(err)
	}
	got = run("hostname >/dev/null; cat /workspace/repo/README /mnt/session/outputs/o.txt /mnt/memory/notes/d/b.md; ls /mnt/memory/notes")
	if want := "edited\nout\nb\nd"; got != want {
		t.Errorf("in the next pod: %q, want %q", got, want)
	}
}
