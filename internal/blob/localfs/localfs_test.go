package localfs_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/corralhq/corral/internal/blob"
	"github.com/corralhq/corral/internal/blob/blobtest"
	"github.com/corralhq/corral/internal/blob/localfs"
)

func open(t *testing.T) blob.Store {
	s, err := localfs.Open(filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) { blobtest.Run(t, open) }

// TestLinkOutside: a link planted in the directory does not lead a key outside it.
func TestLinkOutside(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "blobs")
	s, err := localfs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "files")); err != nil {
		t.Fatal(err)
	}
	if rc, _, err := s.Open(t.Context(), "files/secret"); err == nil {
		rc.Close()
		t.Fatal("a key read a file outside the store through a link")
	}
}

// TestReopenClearsTmp: what an interrupted write left is removed when the store is opened again.
func TestReopenClearsTmp(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "blobs")
	s, err := localfs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := os.WriteFile(filepath.Join(dir, ".tmp", "left"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = localfs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := os.Stat(filepath.Join(dir, ".tmp", "left")); !os.IsNotExist(err) {
		t.Fatalf("the leftover is still there: %v", err)
	}
}
