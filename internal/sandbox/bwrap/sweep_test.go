package bwrap

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/sandbox/host"
)

func TestSweepDetachesAndKeepsWorkspaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	const deadPID = "4194303"
	if syscall.Kill(4194303, 0) != syscall.ESRCH {
		t.Skip("pid 4194303 exists")
	}
	base := t.TempDir()
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "precious"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The dead server's state directory is its state tmpfs (host.MountState), with a workspace staged in it.
	if err := os.Mkdir(filepath.Join(base, deadPID), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := host.MountState(filepath.Join(base, deadPID), 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = host.UnmountState(filepath.Join(base, deadPID)) })
	box := filepath.Join(base, deadPID, "bwrap-1")
	if err := os.MkdirAll(filepath.Join(box, "workspace"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := host.BindMount(ws, filepath.Join(box, "workspace"), false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = host.Unmount(filepath.Join(box, "workspace")) })
	// A live server's directory is left alone.
	live := filepath.Join(base, "1", "bwrap-2")
	if err := os.MkdirAll(live, 0o700); err != nil {
		t.Fatal(err)
	}

	sweep(base, func(string) {})
	if _, err := os.Stat(filepath.Join(base, deadPID)); !os.IsNotExist(err) {
		t.Errorf("dead server's state dir left: %v", err)
	}
	if len(host.MountsUnder(base)) != 0 {
		t.Errorf("mounts left: %v", host.MountsUnder(base))
	}
	if _, err := os.Stat(filepath.Join(ws, "precious")); err != nil {
		t.Errorf("workspace file lost: %v", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("live server's state dir removed: %v", err)
	}
	// removeShallow refuses to empty a workspace that is still mounted.
	if err := host.BindMount(ws, filepath.Join(live, "x"), false); err == nil {
		t.Fatal("bind onto a missing mount point succeeded")
	}
	if err := os.Mkdir(filepath.Join(live, "workspace"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := host.BindMount(ws, filepath.Join(live, "workspace"), false); err != nil {
		t.Fatal(err)
	}
	defer host.Unmount(filepath.Join(live, "workspace"))
	if err := removeShallow(live); err == nil {
		t.Error("removeShallow removed a directory with a mounted workspace")
	}
	if _, err := os.Stat(filepath.Join(ws, "precious")); err != nil {
		t.Errorf("workspace file lost: %v", err)
	}
}

// TestSweepLinkedStateDirs checks the default layout: neutral directories, each with a link named for its
// server's pid. A dead server's directory and link go; a live one's stay; an unlinked directory goes once it
// is over a minute old.
func TestSweepLinkedStateDirs(t *testing.T) {
	const deadPID = "4194303"
	if syscall.Kill(4194303, 0) != syscall.ESRCH {
		t.Skip("pid 4194303 exists")
	}
	base := t.TempDir()
	mk := func(name string) string {
		dir := filepath.Join(base, name)
		if err := os.MkdirAll(filepath.Join(dir, "bwrap-1"), 0o700); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	deadDir, liveDir, orphan, young := mk("s-dead"), mk("s-live"), mk("s-orphan"), mk("s-young")
	old := time.Now().Add(-2 * time.Minute)
	for _, d := range []string{deadDir, liveDir, orphan} {
		if err := os.Chtimes(d, old, old); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{deadPID + ".1": "s-dead", "1.1": "s-live"} {
		if err := os.Symlink(target, filepath.Join(base, link)); err != nil {
			t.Fatal(err)
		}
	}
	sweep(base, func(string) {})
	for _, gone := range []string{deadDir, filepath.Join(base, deadPID+".1"), orphan} {
		if _, err := os.Lstat(gone); !os.IsNotExist(err) {
			t.Errorf("%s left: %v", gone, err)
		}
	}
	for _, kept := range []string{liveDir, filepath.Join(base, "1.1"), young} {
		if _, err := os.Lstat(kept); err != nil {
			t.Errorf("%s removed: %v", kept, err)
		}
	}
}
