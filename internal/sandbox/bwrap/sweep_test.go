package bwrap

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
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
	box := filepath.Join(base, deadPID, "bwrap-1")
	if err := os.MkdirAll(filepath.Join(box, "workspace"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := bindMount(ws, filepath.Join(box, "workspace"), false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unmount(filepath.Join(box, "workspace")) })
	// A live server's directory is left alone.
	live := filepath.Join(base, "1", "bwrap-2")
	if err := os.MkdirAll(live, 0o700); err != nil {
		t.Fatal(err)
	}

	sweep(base)
	if _, err := os.Stat(filepath.Join(base, deadPID)); !os.IsNotExist(err) {
		t.Errorf("dead server's state dir left: %v", err)
	}
	if len(mountsUnder(base)) != 0 {
		t.Errorf("mounts left: %v", mountsUnder(base))
	}
	if _, err := os.Stat(filepath.Join(ws, "precious")); err != nil {
		t.Errorf("workspace file lost: %v", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("live server's state dir removed: %v", err)
	}
	// removeShallow refuses to empty a workspace that is still mounted.
	if err := bindMount(ws, filepath.Join(live, "x"), false); err == nil {
		t.Fatal("bind onto a missing mount point succeeded")
	}
	if err := os.Mkdir(filepath.Join(live, "workspace"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := bindMount(ws, filepath.Join(live, "workspace"), false); err != nil {
		t.Fatal(err)
	}
	defer unmount(filepath.Join(live, "workspace"))
	if err := removeShallow(live); err == nil {
		t.Error("removeShallow removed a directory with a mounted workspace")
	}
	if _, err := os.Stat(filepath.Join(ws, "precious")); err != nil {
		t.Errorf("workspace file lost: %v", err)
	}
}
