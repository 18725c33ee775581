package workspace_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/blob/localfs"
	"github.com/corralhq/corral/internal/files"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/workspace"
)

// fileService is a real Files API storage (SQLite and a blob directory) for a test.
func fileService(t *testing.T, maxBytes int64) (*files.Service, store.Store) {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), "sqlite://"+filepath.Join(dir, "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	blobs, err := localfs.Open(filepath.Join(dir, "files"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { blobs.Close() })
	svc, err := files.New(files.Config{Store: st, Blobs: blobs, MaxBytes: maxBytes})
	if err != nil {
		t.Fatal(err)
	}
	return svc, st
}

func fileResource(id, fileID, mountPath string) apitype.Resource {
	return apitype.Resource{ID: id, Type: apitype.ResourceFile, FileID: fileID, MountPath: mountPath}
}

// TestPlaceFiles: file resources are copied to their mount paths (the uploads directory, or the workspace),
// read-only; a missing file is a resource error; a deleted resource's file is gone from the next sandbox.
func TestPlaceFiles(t *testing.T) {
	t.Parallel()
	svc, _ := fileService(t, 1<<20)
	ctx := t.Context()
	a, err := svc.Create(ctx, "a.csv", "text/csv", nil, strings.NewReader("a,b\n1,2\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := svc.Create(ctx, "b.bin", "", nil, bytes.NewReader([]byte{0, 1, 2, 0xff}))
	if err != nil {
		t.Fatal(err)
	}
	prov := &fakeProvider{}
	root := t.TempDir()
	p := placerPool(t, prov, root, workspace.Config{Files: svc})
	const session = "sesn_files"
	// A link planted where the file goes must not send the copy outside the workspace.
	ws := filepath.Join(root, session)
	outside := filepath.Join(t.TempDir(), "victim")
	if err := os.MkdirAll(filepath.Join(ws, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "data", "b.bin")); err != nil {
		t.Fatal(err)
	}
	resA := fileResource("sesrsc_a", a.ID, sandbox.UploadsMount+"/"+a.ID)
	resB := fileResource("sesrsc_b", b.ID, "/workspace/data/b.bin")
	missing := fileResource("sesrsc_m", "file_missing", sandbox.UploadsMount+"/missing")
	_, unplaced := provisionWith(t, p, session, resA, resB, missing)
	if len(unplaced) != 1 || unplaced[0].ResourceID != "sesrsc_m" || !strings.Contains(unplaced[0].Error(), "file_missing") {
		t.Fatalf("unplaced %v, want the missing file alone", unplaced)
	}
	dirs := prov.dirs[0]
	if dirs.Session == "" || dirs.Uploads() == "" {
		t.Fatalf("host directories without a session directory: %+v", dirs)
	}
	upA := filepath.Join(dirs.Uploads(), a.ID)
	got, err := os.ReadFile(upA)
	if err != nil || string(got) != "a,b\n1,2\n" {
		t.Fatalf("uploads/%s = %q, %v", a.ID, got, err)
	}
	if fi, _ := os.Stat(upA); fi.Mode().Perm() != 0o444 {
		t.Errorf("placed file mode %v, want 0444", fi.Mode().Perm())
	}
	got, err = os.ReadFile(filepath.Join(ws, "data", "b.bin"))
	if err != nil || !bytes.Equal(got, []byte{0, 1, 2, 0xff}) {
		t.Fatalf("workspace file = %q, %v", got, err)
	}
	if fi, err := os.Lstat(filepath.Join(ws, "data", "b.bin")); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("the planted link is still there: %v %v", fi, err)
	}
	if _, err := os.Stat(outside); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the copy followed the planted link: %v", err)
	}

	// The session drops resource a: the next sandbox does not see it; b stays.
	if err := p.Close(session); err != nil {
		t.Fatal(err)
	}
	if _, unplaced = provisionWith(t, p, session, resB); len(unplaced) != 0 {
		t.Fatalf("unplaced %v", unplaced)
	}
	if _, err := os.Stat(upA); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a deleted resource's file is still placed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ws, "data", "b.bin")); err != nil {
		t.Errorf("the kept resource's file is gone: %v", err)
	}
	// The session is deleted: its workspace and its session directory go.
	if n, err := p.RemoveWorkspaces(ctx, func(context.Context, string) (bool, error) { return true, nil }); err != nil || n != 1 {
		t.Fatalf("RemoveWorkspaces = %d, %v", n, err)
	}
	if _, err := os.Stat(dirs.Session); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the session directory outlived its session: %v", err)
	}
}

// TestPlaceFilesRefused: without file storage, or with a mount path outside the allowed roots, a file
// resource is a resource error and nothing is written.
func TestPlaceFilesRefused(t *testing.T) {
	t.Parallel()
	svc, _ := fileService(t, 1<<20)
	f, err := svc.Create(t.Context(), "a.txt", "", nil, strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	p := placerPool(t, &fakeProvider{}, root, workspace.Config{Files: svc})
	for _, mp := range []string{"/etc/passwd", "/mnt/session/outputs/x", "/mnt/session/uploads/../../../etc/x", "/workspace"} {
		_, unplaced := provisionWith(t, p, "sesn_"+strings.ReplaceAll(strings.Trim(mp, "/"), "/", "_"), fileResource("sesrsc_x", f.ID, mp))
		if len(unplaced) != 1 || !strings.Contains(unplaced[0].Error(), "must lie under") {
			t.Errorf("mount path %s: unplaced %v", mp, unplaced)
		}
	}
	p2 := placerPool(t, &fakeProvider{}, t.TempDir(), workspace.Config{})
	if _, unplaced := provisionWith(t, p2, "sesn_nofiles", fileResource("sesrsc_x", f.ID, "/workspace/a.txt")); len(unplaced) != 1 ||
		!errors.Is(unplaced[0], workspace.ErrNoFiles) {
		t.Errorf("without Files: %v", unplaced)
	}
}

// TestCollectOutputs: regular files under the outputs directory become files scoped to the session, once per
// version; links, pipes and empty files are skipped; the quota holds.
func TestCollectOutputs(t *testing.T) {
	t.Parallel()
	svc, st := fileService(t, 1<<20)
	ctx := t.Context()
	placer, err := workspace.New(workspace.Config{Files: svc, MaxOutputBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	const session = "sesn_out"
	r := &sandbox.Recipe{SessionID: session}
	dirs := sandbox.HostDirs{Workspace: filepath.Join(root, session), Session: filepath.Join(root, ".mnt-"+session)}
	out := dirs.Outputs()
	for _, d := range []string{dirs.Workspace, filepath.Join(out, "sub")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(out, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("report.md", "# report\n")
	write("sub/data.csv", "1,2\n")
	write("empty", "")
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(out, "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(out, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := placer.Collect(ctx, r, dirs); err != nil {
		t.Fatal(err)
	}
	list := func() map[string]string {
		t.Helper()
		fs, err := st.FileList(ctx, &store.FileListParams{ListParams: store.ListParams{Limit: 100}, ScopeID: session})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, f := range fs {
			rc, err := svc.OpenContent(ctx, f.ID)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(rc)
			rc.Close()
			m[f.Filename] += string(b) + "|"
			if f.Scope == nil || f.Scope.ID != session || f.Scope.Type != "session" {
				t.Errorf("file %s scope %+v", f.Filename, f.Scope)
			}
		}
		return m
	}
	got := list()
	if len(got) != 2 || got["report.md"] != "# report\n|" || got["data.csv"] != "1,2\n|" {
		t.Fatalf("collected %v, want report.md and data.csv only", got)
	}
	// Unchanged files are not collected again; a changed one is, as a new file.
	if err := placer.Collect(ctx, r, dirs); err != nil {
		t.Fatal(err)
	}
	write("report.md", "# report, v2\n")
	if err := placer.Collect(ctx, r, dirs); err != nil {
		t.Fatal(err)
	}
	if got = list(); len(got) != 2 || strings.Count(got["report.md"], "|") != 2 || got["data.csv"] != "1,2\n|" {
		t.Fatalf("after a change: %v", got)
	}
	// Past the quota, nothing more is collected and the error says what.
	write("big.bin", strings.Repeat("x", 5000))
	if err := placer.Collect(ctx, r, dirs); !errors.Is(err, workspace.ErrOutputQuota) || !strings.Contains(err.Error(), "big.bin") {
		t.Fatalf("over the quota: %v", err)
	}
	if got = list(); got["big.bin"] != "" {
		t.Fatal("a file past the quota was collected")
	}
}

// TestOutputsCollectedByThePool: the Pool collects a session's outputs when its sandbox dies and when it is
// reaped, without a turn ending.
func TestOutputsCollectedByThePool(t *testing.T) {
	t.Parallel()
	svc, st := fileService(t, 1<<20)
	placer, err := workspace.New(workspace.Config{Files: svc})
	if err != nil {
		t.Fatal(err)
	}
	prov := &fakeProvider{}
	root := t.TempDir()
	p, err := sandbox.NewPool(sandbox.PoolConfig{Provider: prov, WorkspaceRoot: root, Placer: placer, Outputs: placer,
		IdleTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const session = "sesn_pool"
	outputs := func() []string {
		t.Helper()
		fs, err := st.FileList(ctx, &store.FileListParams{ListParams: store.ListParams{Limit: 10}, ScopeID: session})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, f := range fs {
			names = append(names, f.Filename)
		}
		return names
	}
	if _, err := p.Execute(ctx, call(session)); err != nil {
		t.Fatal(err)
	}
	out := prov.dirs[0].Outputs()
	if err := os.WriteFile(filepath.Join(out, "before-death.txt"), []byte("1"), 0o600); err != nil {
		t.Fatal(err)
	}
	prov.live[0].dead.Store(true)
	if _, err := p.Execute(ctx, call(session)); !errors.Is(err, sandbox.ErrSandboxDead) {
		t.Fatalf("a dead sandbox: %v", err)
	}
	if got := outputs(); len(got) != 1 || got[0] != "before-death.txt" {
		t.Fatalf("after the sandbox died: %v", got)
	}
	// A fresh sandbox, then the reaper.
	if _, err := p.Execute(ctx, call(session)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "before-reap.txt"), []byte("2"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for len(outputs()) < 2 {
		select {
		case <-ctx.Done():
			t.Fatalf("the reaper collected nothing: %v", outputs())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if got := outputs(); len(got) != 2 || !slices.Contains(got, "before-reap.txt") {
		t.Fatalf("after reaping: %v", got)
	}
}

// TestCollectOutputsShrunk: truncating a collected output does not give its bytes back to the session's outputs
// quota. Every version collected stays stored in the Files API, so the quota counts every byte ever collected
// from the session, whatever the sandbox does to its files afterwards (issue 21, item 3: one session stored
// 1.8 GB by truncating and rewriting its outputs).
func TestCollectOutputsShrunk(t *testing.T) {
	t.Parallel()
	svc, st := fileService(t, 1<<20)
	ctx := t.Context()
	const quota = 4096
	placer, err := workspace.New(workspace.Config{Files: svc, MaxOutputBytes: quota})
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	const session = "sesn_shrunk"
	r := &sandbox.Recipe{SessionID: session}
	dirs := sandbox.HostDirs{Workspace: filepath.Join(root, session), Session: filepath.Join(root, ".mnt-"+session)}
	if err := os.MkdirAll(dirs.Outputs(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dirs.Workspace, 0o700); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dirs.Outputs(), "big.bin")
	var refused error
	for round := range 8 {
		if err := os.WriteFile(big, bytes.Repeat([]byte{'x'}, 3000), 0o600); err != nil {
			t.Fatal(err)
		}
		// A distinct modification time, as a sandbox's rewrite some time later has.
		mt := time.Unix(1_700_000_000+int64(2*round), 0)
		_ = os.Chtimes(big, mt, mt)
		if err := placer.Collect(ctx, r, dirs); err != nil {
			refused = err
		}
		// Shrunk to one byte, collected again: the shrink must not free the quota.
		if err := os.Truncate(big, 1); err != nil {
			t.Fatal(err)
		}
		mt = mt.Add(time.Second)
		_ = os.Chtimes(big, mt, mt)
		if err := placer.Collect(ctx, r, dirs); err != nil {
			refused = err
		}
	}
	fs, err := st.FileList(ctx, &store.FileListParams{ListParams: store.ListParams{Limit: 100}, ScopeID: session})
	if err != nil {
		t.Fatal(err)
	}
	var stored int64
	for _, f := range fs {
		stored += f.SizeBytes
	}
	t.Logf("8 rounds of write 3000 bytes, collect, truncate to 1 byte, collect: %d files, %d bytes stored (quota %d)", len(fs), stored, quota)
	if stored > quota {
		t.Fatalf("the session stored %d bytes of outputs in %d files, past its quota of %d", stored, len(fs), quota)
	}
	if !errors.Is(refused, workspace.ErrOutputQuota) {
		t.Fatalf("no collection was refused: %v", refused)
	}
}
