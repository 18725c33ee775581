package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/bench"
)

// TestBenchQuick runs `corral bench --quick` end to end: a real binary, real sandboxes (bwrap where it runs, else
// the process backend), and PostgreSQL for failover when one answers (the section is skipped with its reason
// otherwise). It checks the outputs are produced, never the figures.
func TestBenchQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a whole quick benchmark (about 10 s)")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "benchmarks.md")
	if err := os.WriteFile(out, []byte("# Benchmarks\n\n## Store\n\nother engineers' figures\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, "corral"), "bench", "--quick", "--backends", sandboxKind(),
		"--sessions", "1,4", "--scale", "20", "--idle-sessions", "20", "--out", out,
		"--memprofile", filepath.Join(dir, "allocs.pb.gz"), "--blockprofile", filepath.Join(dir, "block.pb.gz"),
		"--mutexprofile", filepath.Join(dir, "mutex.pb.gz"))
	cmd.Dir = dir
	// No corral-sandbox-agent on PATH: outside the source checkout the bench then takes this binary as the agent.
	var path []string
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if !fileExists(filepath.Join(d, agentName)) {
			path = append(path, d)
		}
	}
	cmd.Env = append(os.Environ(), "PATH="+strings.Join(path, string(filepath.ListSeparator)))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("corral bench: %v\nstderr:\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "goal") || !strings.Contains(stdout.String(), "ratio p50") {
		t.Errorf("summary table missing from stdout:\n%s", stdout.String())
	}
	if !strings.Contains(stderr.String(), "ttft: ") {
		t.Errorf("no progress on stderr:\n%s", stderr.String())
	}
	// Outside the source checkout, with no corral-sandbox-agent installed, the agent is this binary: said once.
	if strings.Count(stderr.String(), selfAgentNote) != 1 {
		t.Errorf("stderr does not say once that the agent is the corral binary:\n%s", stderr.String())
	}
	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"other engineers' figures", bench.BeginMarker, "### Time to first token", "### Hands", "### Log",
		"### Scale", "### Idle sessions", "### Multi-agent sessions", "### Closing note", "### A session's history"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if !strings.Contains(string(md), "### Failover") && !strings.Contains(string(md), "failover: ") {
		t.Errorf("report neither measures failover nor says why not:\n%s", md)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "bench.svg"))
	if err != nil || !bytes.HasPrefix(svg, []byte("<svg")) {
		t.Errorf("bench.svg: %v %.80q", err, svg)
	}
	// Each profile is one go tool pprof reads, with samples of the run in it.
	for name, index := range map[string]string{"allocs": "alloc_space", "block": "delay", "mutex": "delay"} {
		top, err := exec.Command("go", "tool", "pprof", "-top", "-sample_index="+index, filepath.Join(dir, name+".pb.gz")).CombinedOutput()
		if err != nil || !strings.Contains(string(top), "flat%") {
			t.Errorf("the %s profile: %v\n%s", name, err, top)
		}
	}
	t.Logf("stdout:\n%s", stdout.String())
}

func TestRecipePackageList(t *testing.T) {
	t.Parallel()
	p, err := packageList("apt:jq, apt:curl=7.88.1-10+deb12u8 ,pip:requests==2.31.0,npm:left-pad@1.3.0,go:golang.org/x/tools/cmd/stringer@v0.20.0")
	if err != nil {
		t.Fatal(err)
	}
	if p.Type != "packages" || strings.Join(p.Apt, " ") != "jq curl=7.88.1-10+deb12u8" || strings.Join(p.Pip, " ") != "requests==2.31.0" ||
		strings.Join(p.Npm, " ") != "left-pad@1.3.0" || strings.Join(p.Go, " ") != "golang.org/x/tools/cmd/stringer@v0.20.0" || len(p.Cargo)+len(p.Gem) != 0 {
		t.Errorf("packageList = %+v", p)
	}
	if p, err := packageList(" "); p != nil || err != nil {
		t.Errorf("packageList(blank) = %+v, %v; want none", p, err)
	}
	for _, bad := range []string{"jq", "brew:jq", "apt:", ":jq"} {
		if _, err := packageList(bad); err == nil {
			t.Errorf("packageList(%q) accepted", bad)
		}
	}
}

// TestBenchFlagErrors: bad levels, turns and profile paths are refused before anything runs, saying which flag.
func TestBenchFlagErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--history", "-1"}, `--history: bad level "-1"`},
		{[]string{"--history", "0,x"}, `--history: bad level "x"`},
		{[]string{"--history-turns", "0"}, "--history-turns must be positive"},
		{[]string{"--sessions", "0"}, `--sessions: bad level "0"`},
		{[]string{"--memprofile", "/nonexistent/dir/allocs.pb.gz"}, "no such file or directory"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), &stdio{out: &out, err: &errb}, append([]string{"bench", "--out", ""}, c.args...))
		if code == 0 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("corral bench %s: exit %d, %q; want %q", strings.Join(c.args, " "), code, errb.String(), c.want)
		}
	}
}
