package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestQuotaNote fills a small tmpfs by bytes, then by inodes, and checks the note the write tools' results
// end with, and the message of ENOSPC.
func TestQuotaNote(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=4m,nr_inodes=200"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mount a tmpfs: %v", err)
		}
		t.Skipf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	if n := fsNote(dir); n != "" {
		t.Fatalf("an empty filesystem: %q", n)
	}
	err := os.WriteFile(filepath.Join(dir, "big"), make([]byte, 5<<20), 0o600)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("writing 5 MiB into 4: %v", err)
	}
	if msg := fsErrorMessage(err); !strings.Contains(msg, "no space left on device") || !strings.Contains(msg, "quota") {
		t.Errorf("ENOSPC's message: %q", msg)
	}
	if n := fsNote(dir); !strings.Contains(n, dir+" is full (its disk quota)") {
		t.Errorf("a full filesystem: %q", n)
	}
	if err := os.Remove(filepath.Join(dir, "big")); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprint(i)), nil, 0o600); err != nil {
			break
		}
	}
	n := fsNote(dir)
	if !strings.Contains(n, dir+" is full (its file (inode) quota)") || !strings.Contains(n, "0 of 200 files free") {
		t.Errorf("a filesystem out of inodes: %q", n)
	}
	s := &Server{cfg: Config{Workspace: dir}}
	if note := s.quotaNote(); !strings.HasPrefix(note, "\n[quota: "+dir) || !strings.Contains(note, "No space left on device") {
		t.Errorf("the result's note: %q", note)
	}
}
