package sandboxtest

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/cgroup"
)

// crashReport is what a crash child tells its parent about what it holds on the host.
type crashReport struct {
	Paths      []string // the provider's host paths (HostPaths)
	Cgroups    []string // the sandboxes' cgroup directories (CgroupDirs)
	Pids       []int    // the host processes in those groups
	Workspaces string   // the child's workspace root, for the parent to remove
}

// hostPaths is implemented by providers that say which host paths they keep while they run.
type hostPaths interface{ HostPaths() []string }

// cgroupDirs is implemented by sandboxes that say where their cgroups are.
type cgroupDirs interface{ CgroupDirs() []string }

// RunCrash checks that sandboxes die with their server and that nothing accumulates across restarts. It starts
// a child process of the test binary (the server) that provisions two sandboxes from newProvider, one with a
// call in flight and one with processes left running in the background (one of them in a session of its own,
// out of the shell's process group), and SIGKILLs it. Then every host process of those sandboxes must be gone
// without any help, and once a new provider has started (its sweep) and closed cleanly, no cgroup, state
// directory, runtime root or link of either may be left. newProvider must use the backend's default state
// locations, which the sweep covers.
func RunCrash(t *testing.T, newProvider func(testing.TB) sandbox.Provider) {
	if out := crashChildReport(); out != "" {
		crashChild(t, newProvider, out)
		return
	}
	// A clean stop leaves nothing either.
	first := newProvider(t)
	firstPaths := providerPaths(t, first)
	closeProvider(t, first)
	assertGone(t, "after a clean Close", firstPaths)

	report := filepath.Join(t.TempDir(), "report.json")
	cmd := exec.Command(os.Args[0], "-test.run="+testPattern(t.Name()), "-test.v", "-test.count=1")
	cmd.Env = crashChildEnviron(report)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var rep crashReport
	deadline := time.After(3 * time.Minute)
	for rep.Cgroups == nil {
		select {
		case err := <-exited:
			t.Fatalf("the server exited before it was killed (%v):\n%s", err, out.String())
		case <-deadline:
			_ = cmd.Process.Kill()
			<-exited
			t.Fatalf("no report from the server after 3 minutes:\n%s", out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if data, err := os.ReadFile(report); err == nil {
			if err := json.Unmarshal(data, &rep); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() { _ = os.RemoveAll(rep.Workspaces) })
	if len(rep.Pids) == 0 || len(rep.Paths) == 0 {
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("the server reported no host process or path of its own: %+v", rep)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited

	// Nothing of the sandboxes may survive their server, before any restart.
	var alive []int
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		alive = alive[:0]
		for _, pid := range rep.Pids {
			if running(pid) {
				alive = append(alive, pid)
			}
		}
		for _, dir := range rep.Cgroups {
			for _, pid := range cgroup.ProcsIn(dir) {
				if !slices.Contains(alive, pid) {
					alive = append(alive, pid)
				}
			}
		}
		if len(alive) == 0 || time.Now().After(end) {
			break
		}
	}
	if len(alive) > 0 {
		t.Errorf("processes of the killed server's sandboxes still run 30 s after it died: %v\n%s", describe(alive), out.String())
	}

	// The next start sweeps what the dead server left; its clean stop leaves nothing of its own.
	next := newProvider(t)
	nextPaths := providerPaths(t, next)
	closeProvider(t, next)
	assertGone(t, "of the killed server after a restart", append(rep.Paths, rep.Cgroups...))
	assertGone(t, "of the restarted provider after its Close", nextPaths)
}

// crashChild is RunCrash in the child: provision, report, wait to be killed.
func crashChild(t *testing.T, newProvider func(testing.TB) sandbox.Provider, report string) {
	p := newProvider(t)
	rep := crashReport{Paths: providerPaths(t, p), Workspaces: WorkspaceRoot(t)}
	var boxes []sandbox.Sandbox
	for i := range 2 {
		ws := filepath.Join(rep.Workspaces, "s"+strconv.Itoa(i))
		if err := os.MkdirAll(ws, 0o700); err != nil {
			t.Fatal(err)
		}
		sb, err := p.Provision(context.Background(), &sandbox.Recipe{SessionID: "crash" + strconv.Itoa(i)}, sandbox.HostDirs{Workspace: ws})
		if err != nil {
			t.Fatalf("Provision: %v", err)
		}
		boxes = append(boxes, sb)
		g, ok := sb.(cgroupDirs)
		if !ok {
			t.Fatalf("%T does not report its cgroups (CgroupDirs)", sb)
		}
		if len(g.CgroupDirs()) == 0 {
			t.Fatal("the sandbox has no cgroup")
		}
		rep.Cgroups = append(rep.Cgroups, g.CgroupDirs()...)
	}
	// A provider that keeps processes of its own in cgroups (bwrap's starts kept ready) reports them: they too
	// must die with the server, and their groups be swept.
	if g, ok := p.(cgroupDirs); ok {
		for end := time.Now().Add(10 * time.Second); len(g.CgroupDirs()) == 0; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatal("the provider reports no cgroup of its own (CgroupDirs) within 10 s")
			}
		}
		rep.Cgroups = append(rep.Cgroups, g.CgroupDirs()...)
	}
	in, _ := json.Marshal(map[string]any{"command": "sleep 3600 >/dev/null 2>&1 & setsid sleep 3601 >/dev/null 2>&1 < /dev/null & echo started"})
	if res, err := boxes[0].Execute(context.Background(), "", "bash", in); err != nil || res.IsError {
		t.Fatalf("bash: %v %+v", err, res)
	}
	in, _ = json.Marshal(map[string]any{"command": "sleep 3602", "timeout_ms": 3600000})
	go func() { _, _ = boxes[1].Execute(context.Background(), "", "bash", in) }()
	// Until the call in flight has started its command: the group then holds one process more (under gVisor,
	// whose processes are not the host's, the wait runs out).
	before := len(pidsOf(rep.Cgroups))
	for end := time.Now().Add(3 * time.Second); len(pidsOf(rep.Cgroups)) <= before && time.Now().Before(end); {
		time.Sleep(20 * time.Millisecond)
	}
	rep.Pids = pidsOf(rep.Cgroups)
	data, _ := json.Marshal(rep)
	if err := os.WriteFile(report+".tmp", data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(report+".tmp", report); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Minute)
	t.Fatal("the crash child was not killed")
}

// pidsOf lists the processes in the pids groups among dirs.
func pidsOf(dirs []string) []int {
	var pids []int
	for _, d := range dirs {
		if strings.Contains(d, "/pids/") {
			pids = append(pids, cgroup.ProcsIn(d)...)
		}
	}
	return pids
}

// running reports whether pid exists and is not a zombie.
func running(pid int) bool {
	if syscall.Kill(pid, 0) == syscall.ESRCH {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || !strings.HasPrefix(strings.TrimSpace(string(stat[i+1:])), "Z")
}

// describe names processes by their command lines.
func describe(pids []int) string {
	var b strings.Builder
	for _, pid := range pids {
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		b.WriteString(strconv.Itoa(pid) + " " + strings.ReplaceAll(string(cmdline), "\x00", " ") + "; ")
	}
	return b.String()
}

func providerPaths(t *testing.T, p sandbox.Provider) []string {
	t.Helper()
	hp, ok := p.(hostPaths)
	if !ok {
		t.Fatalf("%T does not report its host paths (HostPaths)", p)
	}
	paths := hp.HostPaths()
	if len(paths) == 0 {
		t.Fatalf("%T reports no host paths: it must be given the backend's default locations", p)
	}
	for _, path := range paths {
		if _, err := os.Lstat(path); err != nil {
			t.Fatalf("reported host path: %v", err)
		}
	}
	return paths
}

func closeProvider(t *testing.T, p sandbox.Provider) {
	t.Helper()
	c, ok := p.(io.Closer)
	if !ok {
		t.Fatalf("%T has no Close", p)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func assertGone(t *testing.T, what string, paths []string) {
	t.Helper()
	for _, path := range paths {
		if _, err := os.Lstat(path); !os.IsNotExist(err) {
			t.Errorf("left %s: %s (%v)", what, path, err)
		}
	}
}

// testPattern is a -test.run pattern that matches exactly the test named name.
func testPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}
