package host

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestAllocUIDHostWide: a uid another process on the host holds (its claim under UIDClaimDir, flocked) is never
// handed out, whatever uid range each process was given; once that process is gone, its uid is free again
// (issue 21, item 8: two Corral processes on one host gave two sandboxes one uid).
func TestAllocUIDHostWide(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the host-wide claims live under /run: root only")
	}
	flock, err := exec.LookPath("flock")
	if err != nil {
		t.Skip("no flock(1) to play the other process")
	}
	const base, count = 910000, 4
	want, err := AllocUID(base, count, "session-x")
	if err != nil {
		t.Fatal(err)
	}
	FreeUID(want)
	// Another process claims the uid this session prefers, as a second Corral process on the host would.
	if err := os.MkdirAll(UIDClaimDir, 0o700); err != nil {
		t.Fatal(err)
	}
	other := exec.Command(flock, "-n", "-F", filepath.Join(UIDClaimDir, strconv.Itoa(want)), "sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	got, err := AllocUID(base, count, "session-x")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the other process holds uid %d; this one got %d", want, got)
	FreeUID(got)
	if got == want {
		_ = other.Process.Kill()
		_ = other.Wait()
		t.Fatalf("uid %d, held by another process on the host, was handed out again", got)
	}
	// The other process dies: its claim goes with it.
	_ = other.Process.Kill()
	_ = other.Wait()
	again, err := AllocUID(base, count, "session-x")
	if err != nil {
		t.Fatal(err)
	}
	FreeUID(again)
	if again != want {
		t.Fatalf("after the other process died: uid %d, want %d", again, want)
	}
}
