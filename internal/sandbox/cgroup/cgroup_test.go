package cgroup

import (
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
