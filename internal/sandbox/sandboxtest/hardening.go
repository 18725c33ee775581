package sandboxtest

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

// RunHardening checks what a sandbox must not inherit from its host, whatever the host's state: no file
// descriptor the server holds (InheritedFDs). Run it for every isolating backend.
func RunHardening(t *testing.T, newProvider func(testing.TB) sandbox.Provider) {
	t.Run("InheritedFDs", func(t *testing.T) { testInheritedFDs(t, newProvider) })
}

// testInheritedFDs leaves descriptors open without close-on-exec in the server, as a supervisor, a CI runner
// or a wrapper script may (a root-only file, opened without O_CLOEXEC and with FD_CLOEXEC cleared afterwards,
// and a pipe holding a canary), and checks that no process in the sandbox holds any descriptor the server
// held before the sandbox existed, and that none of the shell's descriptors reads the canary.
func testInheritedFDs(t *testing.T, newProvider func(testing.TB) sandbox.Provider) {
	canary := fmt.Sprintf("corral-fd-canary-%d", time.Now().UnixNano())
	secret := filepath.Join(t.TempDir(), "inherited-secret")
	if err := os.WriteFile(secret, []byte(canary), 0o600); err != nil {
		t.Fatal(err)
	}
	fd1, err := syscall.Open(secret, syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd1) })
	f2, err := os.Open(secret)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f2.Close() })
	if _, _, errno := syscall.Syscall(syscall.SYS_FCNTL, f2.Fd(), syscall.F_SETFD, 0); errno != 0 {
		t.Fatal(errno)
	}
	var pfd [2]int
	if err := syscall.Pipe(pfd[:]); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(pfd[0]); syscall.Close(pfd[1]) })
	if _, err := syscall.Write(pfd[1], []byte(canary)); err != nil {
		t.Fatal(err)
	}
	// What the server holds before any sandbox exists: none of it may cross. /dev/null and terminals name
	// no particular descriptor and are left out.
	held := map[string]bool{}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil || target == "/dev/null" || strings.HasPrefix(target, "/dev/pts/") || strings.HasPrefix(target, "anon_inode:") {
			continue
		}
		held[target] = true
	}
	p := newPool(t, newProvider, 0)
	// Every descriptor of every process the sandbox can see, and what reading each of the shell's gives.
	const script = `for p in /proc/[0-9]*; do for f in $p/fd/*; do echo "fd $f $(readlink $f)"; done; done
for n in $(ls /proc/$$/fd); do if [ "$n" -gt 2 ]; then timeout 1 cat <&$n; fi; done 2>/dev/null
echo; echo done`
	out := mustRun(t, p, bash("fds", script))
	t.Logf("descriptors in the sandbox:\n%s", out)
	if !strings.HasSuffix(out, "done") || !strings.Contains(out, "fd /proc/") {
		t.Fatalf("probe did not finish: %q", out)
	}
	if strings.Contains(out, canary) {
		t.Errorf("the sandbox read the canary through an inherited descriptor")
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "fd" && held[f[2]] {
			t.Errorf("%s is %s, a descriptor of the server's", f[1], f[2])
		}
	}
}
