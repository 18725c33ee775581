package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHeapProfileAt: the profile is written after the delay, a heap profile pprof reads back; stopped first, it is
// not written; a path that cannot be created is said in the progress, not fatal.
func TestHeapProfileAt(t *testing.T) {
	progress := &lockedLog{} // failover.go's: the timer's goroutine writes it while the test reads it
	b := &benchRun{cfg: &Config{Stderr: progress}, rep: Report{Started: time.Now()}}
	dir := t.TempDir()
	path := filepath.Join(dir, "heap-1.pb.gz")
	b.heapProfileAt(path, 0)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(progress.String(), "heap profile written") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	data, err := os.ReadFile(path)
	if err != nil || len(data) < 2 || data[0] != 0x1f || data[1] != 0x8b {
		t.Fatalf("the profile %s: %v, %d bytes, want a gzipped profile (progress: %s)", path, err, len(data), progress.String())
	}

	stopped := filepath.Join(dir, "heap-2.pb.gz")
	if stop := b.heapProfileAt(stopped, time.Hour); !stop() {
		t.Error("stop before the delay reported the profile already written")
	}
	if _, err := os.Stat(stopped); !os.IsNotExist(err) {
		t.Errorf("a stopped profile was written: %v", err)
	}

	progress = &lockedLog{}
	b.cfg.Stderr = progress
	b.heapProfileAt(filepath.Join(dir, "no-such-dir", "heap.pb.gz"), 0)
	for !strings.Contains(progress.String(), "scale: heap profile: ") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(progress.String(), "no such file or directory") {
		t.Errorf("an uncreatable path: progress %q, want the error", progress.String())
	}
}

// TestIdleHeapProfile: --idle-heapprofile's prefix gives one profile per snapshot, PREFIX-before.pb.gz and
// PREFIX-after.pb.gz; without it nothing is written.
func TestIdleHeapProfile(t *testing.T) {
	progress := &lockedLog{}
	dir := t.TempDir()
	b := &benchRun{cfg: &Config{Stderr: progress}, rep: Report{Started: time.Now()}}
	b.idleHeapProfile("before") // no prefix: nothing
	if entries, _ := os.ReadDir(dir); len(entries) != 0 || progress.String() != "" {
		t.Fatalf("without a prefix: %d files, progress %q, want none", len(entries), progress.String())
	}
	b.cfg.IdleHeapProfile = filepath.Join(dir, "idle")
	for _, when := range []string{"before", "after"} {
		b.idleHeapProfile(when)
		path := filepath.Join(dir, "idle-"+when+".pb.gz")
		data, err := os.ReadFile(path)
		if err != nil || len(data) < 2 || data[0] != 0x1f || data[1] != 0x8b {
			t.Fatalf("%s: %v, %d bytes, want a gzipped profile (progress: %s)", path, err, len(data), progress.String())
		}
		if !strings.Contains(progress.String(), "idle: heap profile written to "+path) {
			t.Errorf("progress %q does not say where the %s profile went", progress.String(), when)
		}
	}
}
