package image

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestFlattenBounded: a build's upper directory can hold far more apparent bytes than its disk limit (a sparse
// file, one file under many names); flatten, which writes the layer on the host's disk, must stay within the
// limit, and keep a hard-linked file one inode.
func TestFlattenBounded(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("flatten chowns the layer's files: needs root")
	}
	const limit = 1 << 20
	base := t.TempDir()
	if err := os.MkdirAll(filepath.Join(base, "usr", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "usr", "bin", "sh"), []byte("base"), 0o755); err != nil {
		t.Fatal(err)
	}

	t.Run("sparse", func(t *testing.T) {
		upper := t.TempDir()
		f, err := os.Create(filepath.Join(upper, "big"))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(1 << 40); err != nil { // 1 TiB of holes: no blocks in the build's volume
			t.Fatal(err)
		}
		f.Close()
		dst := filepath.Join(t.TempDir(), "rootfs")
		err = flatten(base, upper, dst, 0, limit)
		if err == nil || !strings.Contains(err.Error(), "disk limit") {
			t.Fatalf("flatten of a 1 TiB sparse file with a 1 MiB limit: %v, want the disk limit's error", err)
		}
	})

	t.Run("hardlinks", func(t *testing.T) {
		upper := t.TempDir()
		if err := os.WriteFile(filepath.Join(upper, "f0"), make([]byte, limit/2), 0o644); err != nil {
			t.Fatal(err)
		}
		for i := 1; i < 100; i++ { // 100 names of a 512 KiB file: 50 MiB if copied per name
			if err := os.Link(filepath.Join(upper, "f0"), filepath.Join(upper, "f"+string(rune('0'+i/10))+string(rune('0'+i%10)))); err != nil {
				t.Fatal(err)
			}
		}
		dst := filepath.Join(t.TempDir(), "rootfs")
		if err := flatten(base, upper, dst, 0, limit); err != nil {
			t.Fatalf("flatten of one 512 KiB file under 100 names with a 1 MiB limit: %v", err)
		}
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dst, "f0"), &st); err != nil {
			t.Fatal(err)
		}
		if st.Nlink != 100 {
			t.Fatalf("the layer's f0 has %d links, want 100 (one inode for the upper's one)", st.Nlink)
		}
	})
}

// TestFlattenDropsSetID: a package script, root in the builder, can make a setuid-root copy of a shell; the
// layer, a directory of the host's, must not hold one.
func TestFlattenDropsSetID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("flatten chowns the layer's files: needs root")
	}
	base := t.TempDir()
	upper := t.TempDir()
	sh := filepath.Join(upper, "rootsh")
	if err := os.WriteFile(sh, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sh, 0o755|os.ModeSetuid|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "rootfs")
	if err := flatten(base, upper, dst, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dst, "rootsh"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 || fi.Mode().Perm() != 0o755 {
		t.Fatalf("the layer's copy of a setuid-root file has mode %v, want -rwxr-xr-x", fi.Mode())
	}
}
