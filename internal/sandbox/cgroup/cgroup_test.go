package cgroup

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestGroup(t *testing.T) {
	if err := Available(DefaultRoot); err != nil {
		t.Skipf("cgroup v1 unavailable: %v", err)
	}
	g, err := New(DefaultRoot, "test-"+strings.ReplaceAll(filepath.Base(t.TempDir()), ".", ""), Limits{MemoryBytes: 64 << 20, Pids: 8, CPUQuota: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Remove() })
	for file, want := range map[string]string{
		filepath.Join(g.dir("memory"), "memory.limit_in_bytes"): "67108864",
		filepath.Join(g.dir("pids"), "pids.max"):                "8",
		filepath.Join(g.dir("cpu"), "cpu.cfs_quota_us"):         "50000",
	} {
		b, err := os.ReadFile(file)
		if err != nil || strings.TrimSpace(string(b)) != want {
			t.Errorf("%s = %q (%v), want %s", file, b, err, want)
		}
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if procs := g.Procs(); len(procs) != 1 || procs[0] != cmd.Process.Pid {
		t.Errorf("Procs = %v", procs)
	}
	// Forks past the limit are refused and counted.
	out, _ := exec.Command("sh", "-c", "echo $$ > "+filepath.Join(g.dir("pids"), "cgroup.procs")+"; for i in 1 2 3 4 5 6 7 8 9 10; do sleep 1 & done; wait").CombinedOutput()
	if ev := g.Events(); ev.PidsMax == 0 {
		t.Errorf("pids limit not hit: %+v %s", ev, out)
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil {
		t.Error("process survived Remove")
	}
	if err := g.Remove(); err != nil {
		t.Errorf("second Remove: %v", err)
	}
}

func TestSweepKeepsPopulatedAndNewGroups(t *testing.T) {
	if err := Available(DefaultRoot); err != nil {
		t.Skipf("cgroup v1 unavailable: %v", err)
	}
	stale, err := New(DefaultRoot, "sweeptest-stale", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := New(DefaultRoot, "sweeptest-fresh", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stale.Remove(); _ = fresh.Remove() })
	old := time.Now().Add(-time.Hour)
	for _, c := range controllers {
		if err := os.Chtimes(stale.dir(c), old, old); err != nil {
			t.Fatal(err)
		}
	}
	Sweep(DefaultRoot, "sweeptest-", time.Minute)
	for _, c := range controllers {
		if _, err := os.Stat(stale.dir(c)); !os.IsNotExist(err) {
			t.Errorf("stale %s group kept: %v", c, err)
		}
		if _, err := os.Stat(fresh.dir(c)); err != nil {
			t.Errorf("fresh %s group removed: %v", c, err)
		}
	}
}

// TestAddRefusesTheWriter: pid 0 in cgroup.procs means the writer, so Add(0) would have moved the server into
// the sandbox's group, whose Kill then killed the server. Add refuses it, init and this process.
func TestAddRefusesTheWriter(t *testing.T) {
	if err := Available(DefaultRoot); err != nil {
		t.Skipf("cgroup v1 unavailable: %v", err)
	}
	g, err := New(DefaultRoot, "addtest-"+strings.ReplaceAll(filepath.Base(t.TempDir()), ".", ""), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Remove() })
	for _, pid := range []int{0, -1, 1, os.Getpid()} {
		if err := g.Add(pid); err == nil {
			t.Errorf("Add(%d) succeeded", pid)
		}
	}
	if procs := g.Procs(); len(procs) != 0 {
		t.Errorf("group holds %v", procs)
	}
	if !killable(2) || killable(0) || killable(1) || killable(os.Getpid()) || killable(os.Getppid()) {
		t.Error("killable lets Kill signal a process group, init, this process or its parent")
	}
}

func TestSetShare(t *testing.T) {
	if err := Available(DefaultRoot); err != nil {
		t.Skipf("cgroup v1 unavailable: %v", err)
	}
	path := "sharetest-" + strings.ReplaceAll(filepath.Base(t.TempDir()), ".", "")
	dir := filepath.Join(DefaultRoot, "cpu", path)
	t.Cleanup(func() { _ = os.Remove(dir) })
	read := func(f string) string {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	_, idleErr := os.Stat(filepath.Join(DefaultRoot, "cpu", "cpu.idle"))
	if err := SetShare(DefaultRoot, path, 256, true); err != nil {
		t.Fatal(err)
	}
	if idleErr == nil && read("cpu.idle") != "1" {
		t.Errorf("cpu.idle = %s, want 1", read("cpu.idle"))
	}
	// Again, from idle: the kernel refuses a weight for an idle group unless idle is left first.
	if err := SetShare(DefaultRoot, path, 512, false); err != nil {
		t.Fatal(err)
	}
	if got := read("cpu.shares"); got != "512" {
		t.Errorf("cpu.shares = %s, want 512", got)
	}
	if idleErr == nil && read("cpu.idle") != "0" {
		t.Errorf("cpu.idle = %s, want 0", read("cpu.idle"))
	}
}

// TestRenameAndSetLimits: a group made without limits and with a process in it takes a new name and then its
// limits; the process stays in it, under them, and Remove removes the renamed group.
func TestRenameAndSetLimits(t *testing.T) {
	if err := Available(DefaultRoot); err != nil {
		t.Skipf("cgroup v1 unavailable: %v", err)
	}
	// Unique on the machine: another test process may make groups under the same parent.
	name := fmt.Sprintf("test-%d-%d", os.Getpid(), time.Now().UnixNano())
	g, err := New(DefaultRoot, name+"-a", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Remove() })
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	old := g.Dirs()
	if err := g.Rename(name + "-b"); err != nil {
		t.Fatal(err)
	}
	for _, d := range old {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s still there after Rename (%v)", d, err)
		}
	}
	for _, d := range g.Dirs() {
		if filepath.Base(d) != name+"-b" {
			t.Errorf("renamed group at %s", d)
		}
	}
	if err := g.SetLimits(Limits{MemoryBytes: 96 << 20, Pids: 5}); err != nil {
		t.Fatal(err)
	}
	if l := g.Limits(); l.MemoryBytes != 96<<20 || l.Pids != 5 {
		t.Errorf("Limits = %+v", l)
	}
	for file, want := range map[string]string{
		filepath.Join(g.dir("memory"), "memory.limit_in_bytes"): "100663296",
		filepath.Join(g.dir("pids"), "pids.max"):                "5",
	} {
		if b, err := os.ReadFile(file); err != nil || strings.TrimSpace(string(b)) != want {
			t.Errorf("%s = %q (%v), want %s", file, b, err, want)
		}
	}
	if procs := g.Procs(); len(procs) != 1 || procs[0] != cmd.Process.Pid {
		t.Errorf("Procs after Rename = %v, want [%d]", procs, cmd.Process.Pid)
	}
	if err := g.Rename("a/b"); err == nil {
		t.Error("Rename to a path: no error")
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil {
		t.Error("process survived Remove")
	}
	for _, d := range g.Dirs() {
		t.Errorf("%s left after Remove", d)
	}
}
