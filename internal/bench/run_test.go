package bench_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/bench"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/model/anthropic"
	"github.com/corralhq/corral/internal/proxy"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/bwrap"
	"github.com/corralhq/corral/internal/sandbox/process"
	"github.com/corralhq/corral/internal/sandbox/sandboxtest"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/workspace"
	"github.com/corralhq/corral/internal/workspace/memstore"
)

// buildAgent builds corral-sandbox-agent (static) into dir.
func buildAgent(t *testing.T, dir string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("go is not on PATH under CI: %v", err)
		}
		t.Skipf("go is not on PATH, so the agent cannot be built: %v", err)
	}
	out := filepath.Join(dir, "corral-sandbox-agent")
	cmd := exec.Command(goBin, "build", "-o", out, "../../cmd/corral-sandbox-agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build agent: %v\n%s", err, msg)
	}
	return out
}

// TestRunQuick runs the benchmark in process, every section, on the process backend (and a backend that
// cannot run, which is skipped with its reason). It checks that the outputs are produced, never the figures.
func TestRunQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a whole small benchmark")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	agent := buildAgent(t, dir)
	out := filepath.Join(dir, "benchmarks.md")
	if err := os.WriteFile(out, []byte("# Benchmarks\n\n## Store\n\nother engineers' figures\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cfg := bench.Config{
		Args: []string{"--quick"}, Quick: true,
		Backends: func(string) ([]bench.Backend, error) {
			return []bench.Backend{
				{Name: "bwrap", Unavailable: "bubblewrap is not installed: apt-get install bubblewrap"},
				{Name: "process", New: func(string) (sandbox.Provider, error) {
					return process.New(process.Config{AgentPath: agent})
				}},
			}, nil
		},
		OpenStore: func(ctx context.Context, url string) (store.Store, error) { return sqlite.Open(ctx, url) },
		Model: func(baseURL string, hc *http.Client) model.Model {
			return anthropic.New(anthropic.Config{APIKey: "bench", BaseURL: baseURL, HTTPClient: hc})
		},
		Sessions: []int{1, 2}, Samples: 2, GvisorMax: 10, ToolShare: 0.5,
		ModelTTFT: 20 * time.Millisecond, ModelPerToken: time.Millisecond,
		Scale: []int{4}, ScaleTTFT: 50 * time.Millisecond, ScalePerSlot: 1, IdleSessions: 8,
		HistoryEvents: []int{0, 42}, HistoryTurns: 2,
		Sections: bench.Sections, FailoverRuns: 1, FailoverLeaseTTL: 2 * time.Second, Workers: 20,
		MultiagentRuns: 2, MultiagentChildren: 3, MultiagentRounds: 1,
		Out: out, Stdout: &stdout, Stderr: &stderr,
	}
	if err := bench.Run(context.Background(), cfg); err != nil {
		t.Fatalf("Run: %v\nstderr:\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "goal") || !strings.Contains(stdout.String(), "ratio p50") {
		t.Errorf("summary table missing from stdout:\n%s", stdout.String())
	}
	if !strings.Contains(stderr.String(), "ttft: ") {
		t.Errorf("no progress on stderr:\n%s", stderr.String())
	}
	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"other engineers' figures", bench.BeginMarker, "### Time to first token", "### Hands", "### Log",
		"### Scale", "### Idle sessions", "### Multi-agent sessions", "### Closing note", "bubblewrap is not installed: apt-get install bubblewrap",
		"### A session's history", "\n| 42 | ", " group commits/s of ",
		"failover: it runs `corral harness` processes"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	svg, err := os.ReadFile(filepath.Join(dir, "bench.svg"))
	if err != nil || !bytes.HasPrefix(svg, []byte("<svg")) {
		t.Errorf("bench.svg: %v %.80q", err, svg)
	}
}

func TestRunNeedsOpenerAndModel(t *testing.T) {
	t.Parallel()
	if err := bench.Run(context.Background(), bench.Config{}); err == nil {
		t.Error("Run without OpenStore and Model succeeded")
	}
}

// TestRecipe runs the recipe section at its smallest (one concurrent session, two sessions per mode, a
// repository of 1 MiB) on the process backend, with the workspace placer as corral bench wires it: every tool
// session's first tool result must show the cloned repository's history (the workload checks it), in both
// modes.
func TestRecipe(t *testing.T) {
	if testing.Short() {
		t.Skip("runs servers, sandboxes and clones")
	}
	if _, err := exec.LookPath("git"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("git is not on PATH under CI: %v", err)
		}
		t.Skipf("git unavailable: %v", err)
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	agent := buildAgent(t, dir)
	out := filepath.Join(dir, "benchmarks.md")
	var stdout, stderr bytes.Buffer
	var placers int
	cfg := bench.Config{
		Backends: func(string) ([]bench.Backend, error) {
			return []bench.Backend{{Name: "process", New: func(string) (sandbox.Provider, error) {
				return process.New(process.Config{AgentPath: agent})
			}}}, nil
		},
		Recipe: func(git bench.RecipeGit) (bench.RecipeParts, error) {
			placers++
			p, err := workspace.New(workspace.Config{Resolve: proxy.Resolver([]string{git.HostPort}), ExtraRootCAsPEM: git.CAPEM})
			return bench.RecipeParts{Placer: p}, err
		},
		OpenStore: func(ctx context.Context, url string) (store.Store, error) { return sqlite.Open(ctx, url) },
		Model: func(baseURL string, hc *http.Client) model.Model {
			return anthropic.New(anthropic.Config{APIKey: "bench", BaseURL: baseURL, HTTPClient: hc})
		},
		ToolShare: 0.5, ModelTTFT: 20 * time.Millisecond, ModelPerToken: time.Millisecond, Workers: 20,
		Sections: []string{"recipe"}, RecipeSessions: []int{1}, RecipeSamples: 2, RecipeRepoBytes: 1 << 20,
		Out: out, Stdout: &stdout, Stderr: &stderr,
	}
	if err := bench.Run(context.Background(), cfg); err != nil {
		t.Fatalf("Run: %v\nstderr:\n%s", err, stderr.String())
	}
	if placers != 1 {
		t.Errorf("Recipe called %d times, want 1", placers)
	}
	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// One level, both modes: 2 sessions each, none failed; one of each two used the tool.
	for _, want := range []string{"### The recipe", "git -C bench-repo rev-list --count HEAD", "| 1 | ", "| 2+2 (0+0) |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q:\n%s\nstderr:\n%s", want, md, stderr.String())
		}
	}
	if strings.Contains(string(md), "| — | — |") || strings.Contains(string(md), "failed; first error") {
		t.Errorf("a mode measured no first tool result, or sessions failed:\n%s", md)
	}
}

// TestMultiagent runs the multiagent section at a small size on the process backend: a few coordinator sessions
// starting one child each, alternating with single-agent sessions, and two fan-out sessions of a coordinator
// answer with 24 start_thread calls (the most the brain runs beside the coordinator). Every run must succeed,
// every child start, and the report must carry each figure, measured.
func TestMultiagent(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a server, sandboxes and multi-agent sessions")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	agent := buildAgent(t, dir)
	out := filepath.Join(dir, "benchmarks.md")
	var stdout, stderr bytes.Buffer
	cfg := bench.Config{
		Backends: func(string) ([]bench.Backend, error) {
			return []bench.Backend{{Name: "process", New: func(string) (sandbox.Provider, error) {
				return process.New(process.Config{AgentPath: agent})
			}}}, nil
		},
		OpenStore: func(ctx context.Context, url string) (store.Store, error) { return sqlite.Open(ctx, url) },
		Model: func(baseURL string, hc *http.Client) model.Model {
			return anthropic.New(anthropic.Config{APIKey: "bench", BaseURL: baseURL, HTTPClient: hc})
		},
		ModelTTFT: 20 * time.Millisecond, ModelPerToken: time.Millisecond, Workers: 20,
		Sections: []string{"multiagent"}, MultiagentRuns: 3, MultiagentChildren: 24, MultiagentRounds: 2,
		MultiagentTTFT: 200 * time.Millisecond,
		Out:            out, Stdout: &stdout, Stderr: &stderr,
	}
	if err := bench.Run(context.Background(), cfg); err != nil {
		t.Fatalf("Run: %v\nstderr:\n%s", err, stderr.String())
	}
	mdb, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	md := string(mdb)
	for _, want := range []string{"### Multi-agent sessions", "Backend process.",
		"| coordinator's `start_thread` → the child's first request | 3 | ",
		"| single agent: `bash true` in a warm sandbox → next request | 3 | ",
		"| single agent: first `bash true` (sandbox provisioned) → next request | 3 | ",
		"48 children started, 0 calls refused",
		"| first request, from the coordinator's answer (the starts run one after the other) | 48 | ",
		"| first request, from its own start's append | 48 | ",
		"| next request after its `bash true` answer (the call in its own shell, the result's append) | 48 | ",
		"| its report (and idle status) appended, from its last answer's end | 48 | ",
		"| the fake model's own time per child call | 96 | ",
		"| single agent, warm sandbox | ", "| fan-out child (a new shell of its own) | ",
		"Wall time until every child had reported back"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s\nstderr:\n%s", want, md, stderr.String())
		}
	}
	// Every figure measured (a dash is a figure without samples), and no run failed.
	if strings.Contains(md, "| — |") || strings.Contains(md, "failed; first error") || strings.Contains(md, "Not measured") {
		t.Errorf("a figure is missing or runs failed:\n%s", md)
	}
	if !strings.Contains(stdout.String(), "child's start (start_thread)") || !strings.Contains(stdout.String(), "48 children started, 0 refused") {
		t.Errorf("summary lacks the multi-agent lines:\n%s", stdout.String())
	}
}

// TestMemory runs the memory section small on bwrap (the process backend has no /mnt/memory): a store of 60
// memories, 3 sessions with it (the last changing every file) alternating with 3 without, with the workspace
// placer over the memory stores as corral bench wires it. Every session must succeed, and the report must
// carry each figure, measured: the collection of every file's change costs more than that of none.
func TestMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a server, bwrap sandboxes and memory stores")
	}
	if os.Geteuid() != 0 {
		sandboxtest.Require(t, "bwrap", errors.New("the bwrap backend needs root"))
	}
	sandboxtest.Require(t, "bwrap", bwrap.Available(""))
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	agent := buildAgent(t, dir)
	out := filepath.Join(dir, "benchmarks.md")
	var stdout, stderr bytes.Buffer
	cfg := bench.Config{
		Backends: func(string) ([]bench.Backend, error) {
			return []bench.Backend{{Name: "bwrap", New: func(state string) (sandbox.Provider, error) {
				return bwrap.New(bwrap.Config{AgentPath: agent, StateDir: state})
			}}}, nil
		},
		MemoryPlacer: func(ms store.MemoryStore) (bench.MemoryPlacer, error) {
			return workspace.New(workspace.Config{Path: os.Getenv("PATH"), Memories: memstore.New(ms)})
		},
		OpenStore: func(ctx context.Context, url string) (store.Store, error) { return sqlite.Open(ctx, url) },
		Model: func(baseURL string, hc *http.Client) model.Model {
			return anthropic.New(anthropic.Config{APIKey: "bench", BaseURL: baseURL, HTTPClient: hc})
		},
		ModelTTFT: 20 * time.Millisecond, ModelPerToken: time.Millisecond, Workers: 20,
		Sections: []string{"memory"}, MemoryCount: 60, MemorySessions: 3, MemoryAllChanged: 1,
		Out: out, Stdout: &stdout, Stderr: &stderr,
	}
	if err := bench.Run(context.Background(), cfg); err != nil {
		t.Fatalf("Run: %v\nstderr:\n%s", err, stderr.String())
	}
	mdb, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	md := string(mdb)
	for _, want := range []string{"### Memory stores", "filled (through the store, one transaction per memory) with 60 memories",
		"| bwrap | first tool call, with the store | 3 | ", "| bwrap | first tool call, without | 3 | ",
		"| bwrap | placement, with the store (first sandbox) | 3 | ", "| bwrap | placement in it (sync, nothing changed) | 3 | ",
		"| bwrap | collection, nothing changed | 3 | ", "| bwrap | collection, 10 files changed | 2 | ",
		"| bwrap | collection, all 60 changed | 1 | ", "| bwrap | to idle, all changed | 1 | "} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s\nstderr:\n%s", want, md, stderr.String())
		}
	}
	if strings.Contains(md, "| — |") || strings.Contains(md, "failed; first error") || strings.Contains(md, "Not measured") {
		t.Errorf("a figure is missing or sessions failed:\n%s\nstderr:\n%s", md, stderr.String())
	}
	// The figures are sane: the placement of the store costs something, and writing back 60 changed memories
	// (60 versions) costs more than finding that nothing changed.
	if !strings.Contains(stdout.String(), "memory store (60 memories), bwrap") {
		t.Errorf("summary lacks the memory lines:\n%s", stdout.String())
	}
	none, all := summaryP50(t, stdout.String(), "turn-end collection, nothing changed"), summaryP50(t, stdout.String(), "turn-end collection, all changed")
	if place := summaryP50(t, stdout.String(), "placement, first sandbox"); place <= 0 || none <= 0 || all <= none {
		t.Errorf("placement p50 %v ms, collection p50 %v ms unchanged and %v ms all changed: want positive, all > none", place, none, all)
	}
}

// summaryP50 is the p50 in ms of the summary line that starts with label ("label  p50 / p95  n").
func summaryP50(t *testing.T, summary, label string) float64 {
	t.Helper()
	for line := range strings.SplitSeq(summary, "\n") {
		if rest, ok := strings.CutPrefix(line, label); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				v, err := strconv.ParseFloat(f[0], 64)
				if err == nil {
					return v
				}
			}
		}
	}
	t.Fatalf("summary has no figure for %q:\n%s", label, summary)
	return 0
}
