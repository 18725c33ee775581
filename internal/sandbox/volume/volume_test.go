package volume

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/sandbox"
)

const testSize = 16 << 20

// newVolumes returns Volumes on a new root, skipping where quotas cannot work (CI runs as root with loop
// devices, where Available must hold: a skip there is a failure), and checks at the end that no mount or loop
// device of the root is left.
func newVolumes(t *testing.T, root string, reserve int64) *Volumes {
	t.Helper()
	if err := Available(""); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("workspace quotas unavailable in CI: %v", err)
		}
		t.Skipf("workspace quotas unavailable: %v", err)
	}
	v, err := New(Config{Root: root, SizeBytes: testSize, Inodes: 128, ReserveBytes: reserve})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := v.Close(); err != nil {
			t.Error(err)
		}
		checkNothingLeft(t, root)
	})
	return v
}

func checkNothingLeft(t *testing.T, root string) {
	t.Helper()
	if data, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(data), root+"/") {
		t.Errorf("mounts left under %s", root)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []string
		files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil && strings.HasPrefix(string(b), root+"/") {
				left = append(left, f)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("loop devices left: %v", left)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func statfs(t *testing.T, dir string) unix.Statfs_t {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func TestAttachDetach(t *testing.T) {
	root := t.TempDir()
	v := newVolumes(t, root, -1)
	dir := filepath.Join(root, "s1")
	ctx := context.Background()
	if err := v.Attach(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if !isMount(dir) {
		t.Fatal("the workspace is not a mount point after Attach")
	}
	st := statfs(t, dir)
	if st.Type != unix.EXT4_SUPER_MAGIC || int64(st.Blocks)*st.Bsize > testSize || st.Files != 128 {
		t.Errorf("workspace filesystem: type %x, %d bytes, %d inodes; want ext4, at most %d bytes, 128 inodes",
			st.Type, int64(st.Blocks)*st.Bsize, st.Files, testSize)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("a new workspace holds %v", ents)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A second Attach shares the mount; only the last Detach unmounts.
	if err := v.Attach(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if err := v.Detach(dir); err != nil || !isMount(dir) {
		t.Fatalf("after one of two Detach: %v, mounted %v", err, isMount(dir))
	}
	if err := v.Detach(dir); err != nil || isMount(dir) {
		t.Fatalf("after the last Detach: %v, mounted %v", err, isMount(dir))
	}
	checkNothingLeft(t, root)
	if err := v.Attach(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != "kept" {
		t.Errorf("the file after a new Attach: %q, %v", b, err)
	}
	if err := v.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if isMount(dir) {
		t.Error("mounted after Remove")
	}
	if _, err := os.Stat(imagePath(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the image after Remove: %v", err)
	}
	if err := v.Remove(dir); err != nil {
		t.Errorf("a second Remove: %v", err)
	}
}

// TestTwoProcesses: a second Volumes on the same root (as a second server process would be) uses the first
// one's mount and never unmounts it.
func TestTwoProcesses(t *testing.T) {
	root := t.TempDir()
	a, b := newVolumes(t, root, -1), newVolumes(t, root, -1)
	dir := filepath.Join(root, "s")
	ctx := context.Background()
	if err := a.Attach(ctx, dir); err != nil {
		t.Fatal(err)
	}
	dev := func() uint64 {
		var st unix.Stat_t
		if err := unix.Stat(dir, &st); err != nil {
			t.Fatal(err)
		}
		return st.Dev
	}
	first := dev()
	if err := b.Attach(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if dev() != first {
		t.Error("the second process mounted the image again")
	}
	if err := b.Detach(dir); err != nil || !isMount(dir) {
		t.Fatalf("the second process's Detach: %v, mounted %v", err, isMount(dir))
	}
	if err := a.Detach(dir); err != nil || isMount(dir) {
		t.Fatalf("the first process's Detach: %v, mounted %v", err, isMount(dir))
	}
}

// TestCrashLeftover: a mount whose lock is free (its server is gone) is unmounted by the next New.
func TestCrashLeftover(t *testing.T) {
	root := t.TempDir()
	v := newVolumes(t, root, -1)
	dir := filepath.Join(root, "s")
	if err := v.Attach(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	// What a SIGKILL does: the lock goes with the process, the mount stays.
	e := v.entry(dir)
	e.lock.Close()
	e.lock, e.refs = nil, 0
	if !isMount(dir) {
		t.Fatal("not mounted")
	}
	newVolumes(t, root, -1)
	if isMount(dir) {
		t.Error("the next New left a dead server's workspace mounted")
	}
}

func TestReserve(t *testing.T) {
	root := t.TempDir()
	v := newVolumes(t, root, 1<<60)
	dir := filepath.Join(root, "s")
	err := v.Attach(context.Background(), dir)
	if !errors.Is(err, ErrReserve) || !strings.Contains(err.Error(), "reserve") {
		t.Fatalf("Attach below the reserve: %v", err)
	}
	if _, err := os.Stat(imagePath(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an image was made below the reserve: %v", err)
	}
}

// TestReserveCountsGrowth: on a filesystem of 100 MiB with a reserve of 60, workspaces of 16 MiB are mounted
// only while the quotas of those mounted fit above the reserve, whatever they already hold.
func TestReserveCountsGrowth(t *testing.T) {
	root := t.TempDir()
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=100m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(root, unix.MNT_DETACH) })
	v := newVolumes(t, root, 60<<20)
	ctx := context.Background()
	for _, s := range []string{"a", "b"} {
		if err := v.Attach(ctx, filepath.Join(root, s)); err != nil {
			t.Fatalf("workspace %s: %v", s, err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "a", "f"), make([]byte, 8<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := v.Attach(ctx, filepath.Join(root, "c")); !errors.Is(err, ErrReserve) {
		t.Fatalf("a third workspace whose quota does not fit above the reserve: %v", err)
	} else {
		t.Log(err)
	}
	if err := v.Detach(filepath.Join(root, "b")); err != nil {
		t.Fatal(err)
	}
	if err := v.Attach(ctx, filepath.Join(root, "c")); err != nil {
		t.Fatalf("the third workspace once another is detached: %v", err)
	}
	for _, s := range []string{"a", "c"} {
		if err := v.Detach(filepath.Join(root, s)); err != nil {
			t.Error(err)
		}
	}
}

// TestPlainWorkspace: a workspace from before quotas (files, no image) is used as it is, never mounted over.
func TestPlainWorkspace(t *testing.T) {
	root := t.TempDir()
	v := newVolumes(t, root, -1)
	dir := filepath.Join(root, "old")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := v.Attach(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	if isMount(dir) {
		t.Error("an old workspace was mounted over")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "f")); string(b) != "old" {
		t.Errorf("the old workspace's file: %q", b)
	}
	if err := v.Detach(dir); err != nil {
		t.Fatal(err)
	}
}

func TestNotUnderRoot(t *testing.T) {
	root := t.TempDir()
	v := newVolumes(t, root, -1)
	if err := v.Attach(context.Background(), filepath.Join(root, "a", "b")); err == nil {
		t.Error("Attach of a directory that is not a workspace of the root succeeded")
	}
	if err := v.Attach(context.Background(), filepath.Join(t.TempDir(), "x")); err == nil {
		t.Error("Attach outside the root succeeded")
	}
}

func TestConfig(t *testing.T) {
	for _, c := range []Config{{Root: "rel"}, {Root: "/x", SizeBytes: 1 << 20}, {Root: "/x", Inodes: 10},
		{Root: "/x", SizeBytes: 64 << 20}} { // the default 262,144 inodes' tables fill 64 MiB
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) succeeded", c)
		}
	}
}

// TestReattachWhileStillMounted: the filesystem of a detached workspace may live on in a sandbox's mount
// namespace (here: a second mount of it) while it goes away; attaching again gives the same filesystem, with
// what was written through the other mount, not a second one over the image.
func TestReattachWhileStillMounted(t *testing.T) {
	root := t.TempDir()
	v := newVolumes(t, root, -1)
	dir := filepath.Join(root, "s")
	ctx := context.Background()
	if err := v.Attach(ctx, dir); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "sandbox-view")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(dir, other, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(other, unix.MNT_DETACH)
	if err := v.Detach(dir); err != nil || isMount(dir) {
		t.Fatalf("Detach: %v, mounted %v", err, isMount(dir))
	}
	if err := os.WriteFile(filepath.Join(other, "last"), []byte("written last"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := v.Attach(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "last")); err != nil || string(b) != "written last" {
		t.Errorf("the file written through the filesystem that lived on: %q, %v", b, err)
	}
	var a, b unix.Stat_t
	if unix.Stat(dir, &a) != nil || unix.Stat(other, &b) != nil || a.Dev != b.Dev {
		t.Errorf("a second filesystem over the image: devices %d and %d", a.Dev, b.Dev)
	}
	if err := unix.Unmount(other, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if err := v.Detach(dir); err != nil {
		t.Fatal(err)
	}
}

// workspacesAndFiles makes a 100 MiB tmpfs with a workspaces and a files directory on it, unmounted at the end.
func workspacesAndFiles(t *testing.T) (ws, filesDir string) {
	t.Helper()
	root := t.TempDir()
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=100m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(root, unix.MNT_DETACH) })
	ws = filepath.Join(root, "workspaces")
	filesDir = filepath.Join(root, "files")
	for _, d := range []string{ws, filesDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return ws, filesDir
}

// TestCheckSpace: the Files API's writes count against the reserve: on the workspaces' filesystem, what the
// mounted workspaces may still grow by is set aside first (issue 21, item 3).
func TestCheckSpace(t *testing.T) {
	ws, filesDir := workspacesAndFiles(t)
	v := newVolumes(t, ws, 60<<20)
	ctx := context.Background()
	for _, s := range []string{"a", "b"} {
		if err := v.Attach(ctx, filepath.Join(ws, s)); err != nil {
			t.Fatalf("workspace %s: %v", s, err)
		}
		t.Cleanup(func() { _ = v.Detach(filepath.Join(ws, s)) })
	}
	if err := v.CheckSpace(filesDir); err != nil {
		t.Fatalf("100 MiB, 32 MiB promised to the workspaces, a reserve of 60 MiB: %v", err)
	}
	// 10 MiB of files: 90 MiB free, 32 promised, 58 left: below the reserve.
	if err := os.WriteFile(filepath.Join(filesDir, "upload"), make([]byte, 10<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	err := v.CheckSpace(filesDir)
	if !errors.Is(err, ErrReserve) || !strings.Contains(err.Error(), "--sandbox-disk-reserve") {
		t.Fatalf("files past the reserve: %v", err)
	}
	t.Log(err)
	// Another filesystem: the workspaces' growth is not set aside there.
	if err := v.CheckSpace(t.TempDir()); err != nil {
		t.Fatalf("another filesystem: %v", err)
	}
}

// TestCheckSpaceReclaims: idle sessions do not hold the reserve against an active session's files (issue 21
// item 4): before a write is refused, the reclaimer (the Pool: its longest idle sandbox) makes room, one at a
// time, and the write goes ahead once the detached workspaces no longer count; it is refused when nothing more
// can be reclaimed.
func TestCheckSpaceReclaims(t *testing.T) {
	ws, filesDir := workspacesAndFiles(t)
	v := newVolumes(t, ws, 60<<20)
	ctx := context.Background()
	idle := []string{filepath.Join(ws, "a"), filepath.Join(ws, "b")}
	for _, dir := range idle {
		if err := v.Attach(ctx, dir); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, dir := range idle {
			_ = v.Detach(dir)
		}
	})
	// 10 MiB of files: 90 MiB free, 32 promised to the two idle workspaces, 58 left: below the reserve.
	if err := os.WriteFile(filepath.Join(filesDir, "upload"), make([]byte, 10<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	calls := 0
	v.SetReclaim(func() bool {
		calls++
		if len(idle) == 0 {
			return false
		}
		dir := idle[0]
		idle = idle[1:]
		if err := v.Detach(dir); err != nil {
			t.Error(err)
		}
		return true
	})
	if err := v.CheckSpace(filesDir); err != nil {
		t.Fatalf("a write with an idle workspace to reclaim: %v", err)
	}
	if calls != 1 || len(idle) != 1 {
		t.Errorf("reclaimed %d times, %d idle left; want one reclaimed (16 MiB were enough)", calls, len(idle))
	}
	// 25 MiB more: about 64 free, 16 promised; reclaiming the last idle one leaves about 64, enough. 5 more:
	// below the reserve, with nothing left to reclaim.
	if err := os.WriteFile(filepath.Join(filesDir, "upload2"), make([]byte, 25<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := v.CheckSpace(filesDir); err != nil {
		t.Fatalf("a write with the last idle workspace to reclaim: %v", err)
	}
	if err := os.WriteFile(filepath.Join(filesDir, "upload3"), make([]byte, 5<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := v.CheckSpace(filesDir); !errors.Is(err, ErrReserve) {
		t.Fatalf("a write past the reserve with nothing to reclaim: %v", err)
	}
	if calls != 3 || len(idle) != 0 {
		t.Errorf("reclaimed %d times, %d idle left; want 3 calls, the last finding nothing", calls, len(idle))
	}
}

// TestHeadroom: a mounted workspace costs the reserve check what its sparse image uses plus a bounded headroom,
// not its whole quota, so a disk mounts as many workspaces as it holds; strict (headroom = quota) as before.
// A refusal is a sandbox.ErrNoRoom (the pool then reaps idle sandboxes) and names the flags and the figures
// (issue 21 item 4, issue 28 item 1).
func TestHeadroom(t *testing.T) {
	if err := Available(""); err != nil {
		t.Skipf("workspace quotas unavailable: %v", err)
	}
	for _, tc := range []struct {
		name     string
		headroom int64
		want     int
	}{
		{"strict", 64 << 20, 1},
		{"headroom 8 MiB", 8 << 20, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=100m"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = unix.Unmount(root, unix.MNT_DETACH) })
			v, err := New(Config{Root: root, SizeBytes: 64 << 20, Inodes: 128, ReserveBytes: 20 << 20, HeadroomBytes: tc.headroom})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = v.Close() })
			n := 0
			var refused error
			for i := range 20 {
				if err := v.Attach(t.Context(), filepath.Join(root, "w"+strconv.Itoa(i))); err != nil {
					refused = err
					break
				}
				n++
			}
			t.Logf("100 MiB disk, quota 64 MiB, reserve 20 MiB, headroom %d MiB: %d workspaces mounted; then %v", tc.headroom>>20, n, refused)
			if n < tc.want {
				t.Fatalf("%d workspaces mounted, want at least %d", n, tc.want)
			}
			if !errors.Is(refused, sandbox.ErrNoRoom) || !errors.Is(refused, ErrReserve) {
				t.Fatalf("the refusal is no ErrNoRoom: %v", refused)
			}
			for _, flag := range []string{"--sandbox-disk-reserve 20 MiB", "--sandbox-disk-headroom", "--sandbox-disk-overcommit", "MiB free"} {
				if !strings.Contains(refused.Error(), flag) {
					t.Errorf("the refusal does not say %q: %v", flag, refused)
				}
			}
		})
	}
}
