package sandboxtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/sandbox"
)

// RunHardening checks what a sandbox must not inherit from its host, whatever the host's state: no file
// descriptor the server holds (InheritedFDs), no kernel surface beyond the seccomp deny list (Seccomp), and no
// host path in its mount table (MountTable). Run it for every isolating backend.
func RunHardening(t *testing.T, newProvider func(testing.TB) sandbox.Provider, opts HardeningOptions) {
	t.Run("InheritedFDs", func(t *testing.T) { testInheritedFDs(t, newProvider) })
	t.Run("Seccomp", func(t *testing.T) { testSeccomp(t, newProvider, opts) })
	t.Run("MountTable", func(t *testing.T) { testMountTable(t, newProvider) })
}

// agentDir is the host directory of the agent binary Main built, which no sandbox's mount table may show.
var agentDir string

// HardeningOptions tune RunHardening to a backend.
type HardeningOptions struct {
	// AllowClone3 marks a backend that lets clone3 through its seccomp filter (gVisor: oci.Config.AllowClone3).
	AllowClone3 bool
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

// testSeccomp checks that the system calls of the seccomp deny list (package seccomp) fail with EPERM or
// ENOSYS from a sandbox, whatever the kernel would answer, and that threads and ordinary programs still work.
func testSeccomp(t *testing.T, newProvider func(testing.TB) sandbox.Provider, opts HardeningOptions) {
	p := newPool(t, newProvider, 0)
	// Arguments are invalid on purpose: a call that reaches the kernel fails with EINVAL, EFAULT, EBADF or
	// ENOSPC rather than doing anything, and only the filter answers EPERM or ENOSYS for all of them.
	const probe = `import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def probe(name, nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(nr, *[ctypes.c_long(a) for a in args])
    if r == 0 and name == "clone_newuser":
        os._exit(0)
    e = ctypes.get_errno()
    print(name, "ok" if r >= 0 else errno.errorcode.get(e, str(e)))
probe("unshare_newuser", 272, 0x10000000)
probe("unshare_newns", 272, 0x00020000)
probe("clone_newuser", 56, 0x10000000 | 17, 0, 0, 0, 0)
probe("setns", 308, -1, 0)
probe("mount", 165, 0, 0, 0, 0, 0)
probe("io_uring_setup", 425, 1, 0)
probe("io_uring_enter", 426, -1, 0, 0, 0, 0, 0)
probe("io_uring_register", 427, -1, 0, 0, 0)
probe("keyctl", 250, 0, 0, 0, 0, 0)
probe("add_key", 248, 0, 0, 0, 0, 0)
probe("request_key", 249, 0, 0, 0, 0)
probe("bpf", 321, 0, 0, 0)
probe("perf_event_open", 298, 0, 0, -1, -1, 0)
probe("userfaultfd", 323, 0)
probe("kexec_load", 246, 0, 0, 0, 0)
probe("init_module", 175, 0, 0, 0)
probe("clone3", 435, 0, 0)
`
	out := mustRun(t, p, bash("seccomp", "python3 -c '"+probe+"'"))
	t.Logf("probes:\n%s", out)
	lines := strings.Split(out, "\n")
	if len(lines) != 17 {
		t.Fatalf("want 17 probe results, got %q", out)
	}
	for _, l := range lines {
		name, res, _ := strings.Cut(l, " ")
		if name == "clone3" && opts.AllowClone3 {
			continue
		}
		if res != "EPERM" && res != "ENOSYS" {
			t.Errorf("%s: %s, want EPERM or ENOSYS", name, res)
		}
	}
	res, err := p.Execute(context.Background(), bash("seccomp", "unshare -r true && echo UNSHARED"))
	if err != nil || strings.Contains(res.Text(), "UNSHARED") {
		t.Errorf("unshare -r: %v %q", err, res.Text())
	}
	// Threads (clone without CLONE_NEWUSER; glibc falls back from clone3), git and a pipeline still work.
	const threads = `import threading
r = []
ts = [threading.Thread(target=lambda i=i: r.append(i)) for i in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
print(sum(r))`
	if got := mustRun(t, p, bash("seccomp", "python3 -c '"+threads+"'")); got != "28" {
		t.Errorf("threads: %q", got)
	}
	const git = `git init -q r && cd r && git -c user.name=a -c user.email=a@b commit -q --allow-empty -m m && git log --format=%s | cat`
	if got := mustRun(t, p, bash("seccomp", git)); got != "m" {
		t.Errorf("git: %q", got)
	}
}

// testMountTable checks that the sandbox's mount table (/proc/self/mountinfo, /proc/self/mounts, /proc/mounts)
// names no host path that says where the server keeps its data or who it is, on the host's /usr and on an
// image: not the data directory (named corral-data here), not the workspace root in it, not the image's
// directory (an image lives in the data directory: <data>/images), not the provider's state directory
// (/run/corral-bwrap/s-..., <tmp>/corral-oci/s-...: HostPaths) nor any other path under /run or the host's
// temporary directory (where the test keeps all of these), not the directory of the agent binary (which corral
// serve may keep in the data directory), and not the server's pid (state directories used to be named for it).
//
// mountinfo shows a bind mount's root as its path from the root of its filesystem, and no mount option hides
// that. So what a backend stages (the image, the sandbox's /etc, the agent, the proxy socket, an OCI root) must
// be on filesystems of its own: an image is an overlay of the image directory (host.Images), the rest is on a
// tmpfs at the provider's state directory (host.MountState). The image here is a directory on the host's
// root filesystem (the test's temporary directory), as the data directory of a deployment that gives the store
// no volume of its own, unless the provider already runs on an image (OnImage).
//
// The data directory is a filesystem of its own here, as in a deployment that gives the store a volume: a
// workspace directory is bound as it is, so one on the host's root filesystem shows the path of the workspace
// root there. A workspace with a quota (PoolConfig.Volumes) is the root of a filesystem of its own and shows no
// host path wherever it lives: RunQuota checks that with the workspace root on the host's root filesystem.
func testMountTable(t *testing.T, newProvider func(testing.TB) sandbox.Provider) {
	if rootFSOf(newProvider(t)) != "" {
		probeMountTable(t, newProvider, "")
		return
	}
	t.Run("Host", func(t *testing.T) { probeMountTable(t, newProvider, "") })
	t.Run("Image", func(t *testing.T) { probeMountTable(t, newProvider, hostImage(t)) })
}

// probeMountTable runs the probe of testMountTable in a sandbox of newProvider's, on the image rootfs if set.
func probeMountTable(t *testing.T, newProvider func(testing.TB) sandbox.Provider, rootfs string) {
	data := filepath.Join(WorkspaceRoot(t), "corral-data")
	if err := os.Mkdir(data, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", data, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0711,size=64m"); err != nil {
		t.Fatalf("mount the data directory's filesystem: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(data, syscall.MNT_DETACH) })
	root := filepath.Join(data, "workspaces")
	if err := os.Mkdir(root, 0o711); err != nil {
		t.Fatal(err)
	}
	prov := newProvider(t)
	if rootfs != "" {
		prov = OnImage(func(testing.TB) sandbox.Provider { return prov }, rootfs)(t)
	}
	rootfs = rootFSOf(prov)
	pool, err := sandbox.NewPool(sandbox.PoolConfig{Provider: prov, WorkspaceRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Stop() })
	out := mustRun(t, pool, bash("mounts", "cat /proc/self/mountinfo; echo ===; cat /proc/self/mounts; echo ===; cat /proc/mounts"))
	t.Logf("mount table (image %q):\n%s", rootfs, out)
	if strings.Count(out, "===") != 2 || !strings.Contains(out, " /workspace ") {
		t.Fatalf("no mount table: %q", out)
	}
	forbidden := []string{data, root, "corral-data", agentDir, rootfs, filepath.Dir(t.TempDir())}
	if hp, ok := prov.(hostPaths); ok {
		forbidden = append(forbidden, hp.HostPaths()...)
	}
	for _, s := range forbidden {
		if s != "" && strings.Contains(out, s) {
			t.Errorf("the mount table shows %q", s)
		}
	}
	pid := regexp.MustCompile(`(^|/)` + strconv.Itoa(os.Getpid()) + `($|[./])`)
	for _, field := range strings.Fields(out) {
		if pid.MatchString(field) {
			t.Errorf("the mount table shows the server's pid %d in %q", os.Getpid(), field)
		}
		for _, dir := range []string{os.TempDir(), "/run"} {
			if strings.Contains(field, dir+"/") {
				t.Errorf("the mount table shows a path under the host's %s: %q", dir, field)
			}
		}
	}
}

// hostImage makes a minimal image in a directory of the test's, on the host's root filesystem like a data
// directory without a volume of its own: bash and cat with the libraries they load, copied from the host, and
// an /etc.
func hostImage(t *testing.T) string {
	t.Helper()
	img := filepath.Join(WorkspaceRoot(t), "image")
	files := []string{"/usr/bin/bash", "/usr/bin/cat", "/bin/bash", "/bin/cat"}
	for _, bin := range []string{"/usr/bin/bash", "/usr/bin/cat"} {
		out, err := exec.Command("ldd", bin).Output()
		if err != nil {
			t.Fatalf("ldd %s: %v", bin, err)
		}
		for _, f := range strings.Fields(string(out)) {
			if strings.HasPrefix(f, "/") {
				files = append(files, f)
			}
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(img, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(img, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(img, "etc", "passwd"), []byte("root:x:0:0::/root:/bin/bash\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return img
}
