package host

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/sandbox"
)

func TestAllocUIDPrefersTheSessionsUID(t *testing.T) {
	const base, count = 900000, 50
	a, err := AllocUID(base, count, "session-a")
	if err != nil {
		t.Fatal(err)
	}
	FreeUID(a)
	again, err := AllocUID(base, count, "session-a")
	if err != nil {
		t.Fatal(err)
	}
	defer FreeUID(again)
	if again != a {
		t.Errorf("session-a got %d, then %d", a, again)
	}
	// While it is taken, the same key gets another uid in the range.
	other, err := AllocUID(base, count, "session-a")
	if err != nil {
		t.Fatal(err)
	}
	defer FreeUID(other)
	if other == again || other < base || other >= base+count {
		t.Errorf("second uid %d", other)
	}
}

func TestPrepareWorkspaceReowns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	dir := filepath.Join(t.TempDir(), "ws")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub", "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "outside")
	if err := os.WriteFile(outside, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := PrepareWorkspace(dir, 912345); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, filepath.Join(dir, "sub"), filepath.Join(dir, "sub", "f"), filepath.Join(dir, "link")} {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 912345 || st.Gid != 912345 {
			t.Errorf("%s owned by %d:%d", p, st.Uid, st.Gid)
		}
	}
	// The symlink's target outside the workspace is not re-owned.
	fi, _ := os.Stat(outside)
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 {
		t.Errorf("symlink target re-owned to %d", st.Uid)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("workspace mode %v", fi.Mode().Perm())
	}
}

// TestOwnerGone: an owner is gone when its pid is free, or when the process holding the pid started after the
// thing was made (the pid was reused, as by a server restarted in a container); a live owner never is.
func TestOwnerGone(t *testing.T) {
	if OwnerGone(os.Getpid(), time.Now()) {
		t.Error("this process is reported gone")
	}
	started, ok := processStart(os.Getpid())
	if !ok {
		t.Fatal("no start time for this process")
	}
	if !OwnerGone(os.Getpid(), started.Add(-time.Minute)) {
		t.Error("a link made a minute before this process started is reported alive: a reused pid keeps its predecessor's state")
	}
	if syscall.Kill(4194303, 0) == syscall.ESRCH && !OwnerGone(4194303, time.Now()) {
		t.Error("a free pid is reported alive")
	}
	if OwnerGone(0, time.Time{}) || OwnerGone(-1, time.Time{}) {
		t.Error("pid <= 0 is reported gone")
	}
}

// TestReplaceLink: a stale link with the same name (a killed server of the same pid) is replaced; before, the
// backend failed with "file exists" and became unavailable.
func TestReplaceLink(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "123.1")
	if err := os.Symlink("s-old", link); err != nil {
		t.Fatal(err)
	}
	if err := ReplaceLink("s-new", link); err != nil {
		t.Fatal(err)
	}
	if got, err := os.Readlink(link); err != nil || got != "s-new" {
		t.Errorf("link -> %q (%v), want s-new", got, err)
	}
	if err := RemovePaths(link, filepath.Join(dir, "missing")); err != nil {
		t.Errorf("RemovePaths: %v", err)
	}
	if _, err := os.Lstat(link); !os.IsNotExist(err) {
		t.Errorf("link left: %v", err)
	}
}

func TestUndoOrder(t *testing.T) {
	t.Parallel()
	var got []int
	var u Undo
	for i := range 3 {
		u.Add(func() error { got = append(got, i); return nil })
	}
	u.Run()
	if fmt.Sprint(got) != "[2 1 0]" {
		t.Errorf("Run ran %v, want newest first", got)
	}
	if r := u.Reversed(); len(r) != 3 {
		t.Errorf("Reversed has %d steps", len(r))
	}
}

func TestClaimRefusesRelativeWorkspace(t *testing.T) {
	t.Parallel()
	if _, _, err := Claim(&sandbox.Recipe{SessionID: "s"}, sandbox.HostDirs{Workspace: "rel/ws"}, 900000, 1); err == nil || !strings.Contains(err.Error(), "absolute") {
		t.Fatalf("Claim with a relative workspace: %v", err)
	}
	// The uid range (one uid) is still free: nothing was taken.
	uid, err := AllocUID(900000, 1, "s")
	if err != nil {
		t.Fatalf("the uid was not left free: %v", err)
	}
	FreeUID(uid)
}
