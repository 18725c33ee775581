package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/bench"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/model/anthropic"
	"github.com/corralhq/corral/internal/proxy"
	corral "github.com/corralhq/corral/internal/server"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/vault"
	"github.com/corralhq/corral/internal/workspace"
	"github.com/corralhq/corral/internal/workspace/memstore"
)

func init() {
	register("bench", "benchmark a real server against the coupled design: TTFT, overhead, hands, log, scale, failover", runBench)
}

// benchFlags are corral bench's settings.
type benchFlags struct {
	quick          bool
	db             string
	failoverDB     string
	backends       string
	kube           kubeFlags
	sessions       string
	samples        int
	gvisorMax      int
	toolShare      float64
	ttft, perToken time.Duration
	jitter         time.Duration
	scale          string
	scaleTTFT      time.Duration
	scalePerSlot   int
	idleSessions   int
	sections       string
	failoverRuns   int
	leaseTTL       time.Duration
	workers        int
	out, svg       string
	agent          string
	runsc          string
	cpuProfile     string
	memProfile     string
	blockProfile   string
	mutexProfile   string
	traceFile      string
	scaleHeap      string
	idleHeap       string
	history        string
	historyTurns   int
	cpuShare       int
	cpuIdle        bool
	starts         int
	warm           int
	recipeSessions string
	recipeSamples  int
	recipeRepoMB   int64
	recipePackages string
	maRuns         int
	maChildren     int
	maRounds       int
	maTTFT         time.Duration
	memCount       int
	memSessions    int
	memAll         int
	images         imageFlags
	egress         egressFlags
	agentResolved  string // agentPath's answer, once found
}

const defaultFailoverDB = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

func (f *benchFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.quick, "quick", false, "a fast smoke run (seconds): fewer sessions, samples and levels; the flags below still override it")
	fs.StringVar(&f.db, "db", "", "store `URL` of the servers under test: postgres://... (each run in a fresh schema); default a fresh SQLite file per server")
	fs.StringVar(&f.failoverDB, "failover-db", "", "PostgreSQL `URL` for the failover section (default: --db if it is postgres, else $CORRAL_TEST_POSTGRES or "+defaultFailoverDB+", when it answers)")
	fs.StringVar(&f.backends, "backends", "", "comma-separated sandbox `backends` to compare: "+backendList()+" (default: bwrap, oci and gvisor, those that run here)")
	fs.StringVar(&f.sessions, "sessions", "1,10,100", "comma-separated concurrent-session `levels` of the TTFT comparison")
	fs.IntVar(&f.samples, "samples", 30, "TTFT samples per level and mode (at least 2 rounds per level)")
	fs.IntVar(&f.gvisorMax, "gvisor-max", 10, "highest concurrency level run with gvisor (each of its sandboxes takes 0.3-0.5 s of CPU to start: on a 2-vCPU VM, 100 coupled sessions took 3 minutes and overloaded the machine for the sections after)")
	fs.Float64Var(&f.toolShare, "tool-share", 0.5, "fraction of sessions whose first answer is a tool call")
	fs.DurationVar(&f.ttft, "model-ttft", 300*time.Millisecond, "the fake model's time to first token")
	fs.DurationVar(&f.perToken, "model-per-token", 10*time.Millisecond, "the fake model's time per later token")
	fs.DurationVar(&f.jitter, "model-jitter", 30*time.Millisecond, "the fake model's jitter: each wait varies by up to +- this")
	fs.StringVar(&f.scale, "scale", "100,250,500,750,1000,1500,2000", "comma-separated concurrent-session `levels` of the scale search (stops at the first level at or over 50 ms p95 overhead)")
	fs.DurationVar(&f.scaleTTFT, "scale-model-ttft", 2*time.Second, "the fake model's time to first token in the scale section (a session stays active that long per call)")
	fs.IntVar(&f.scalePerSlot, "scale-turns", 2, "fresh sessions each concurrent slot runs, one after the other, at each scale level")
	fs.StringVar(&f.history, "history", "0,100,1000,10000", "comma-separated `levels` of the history section: events in a session's log before its measured turns")
	fs.IntVar(&f.historyTurns, "history-turns", 10, "turns measured at each level of the history section")
	fs.IntVar(&f.idleSessions, "idle-sessions", 1000, "idle sessions created to measure memory per idle session")
	fs.StringVar(&f.idleHeap, "idle-heapprofile", "", "write the idle section's heap profiles, taken with its two measurements, to `prefix`-before.pb.gz and prefix-after.pb.gz (go tool pprof -base shows what the idle sessions hold; run with GODEBUG=memprofilerate=64 for a fine sampling)")
	fs.StringVar(&f.sections, "sections", "ttft,hands,log,history,scale,idle,multiagent,failover", "comma-separated `sections` to run (also: cpu, recipe, memory, webhooks)")
	fs.IntVar(&f.maRuns, "multiagent-runs", 30, "coordinator sessions starting one child in the multiagent section (and as many single-agent sessions, alternating)")
	fs.IntVar(&f.maChildren, "multiagent-children", 24, "start_thread calls of the multiagent fan-out's one coordinator answer (the brain runs at most 25 threads of a session at once, the coordinator included: more are refused)")
	fs.IntVar(&f.maRounds, "multiagent-rounds", 5, "fan-out sessions of the multiagent section, one after the other")
	fs.DurationVar(&f.maTTFT, "multiagent-model-ttft", 2*time.Second, "the fake model's time to first token in the multiagent fan-out (as long as a real call's, so that the children's calls overlap)")
	fs.IntVar(&f.memCount, "memory-memories", 2000, "memories (about 1 KiB each, in a tree of directories) of the memory section's store (at most 5000, the mount limit)")
	fs.IntVar(&f.memSessions, "memory-sessions", 20, "sessions with the store in the memory section (alternating with as many without)")
	fs.IntVar(&f.memAll, "memory-all-changed", 3, "sessions with the store, among --memory-sessions, whose second turn changes every file of the store (the others change 10)")
	fs.StringVar(&f.recipeSessions, "recipe-sessions", "1,10,100", "comma-separated concurrent-session `levels` of the recipe section")
	fs.IntVar(&f.recipeSamples, "recipe-samples", 20, "sessions per level and mode of the recipe section (at least 2 rounds per level)")
	fs.Int64Var(&f.recipeRepoMB, "recipe-repo-mb", 32, "`MiB` of history of the repository each recipe session clones")
	fs.StringVar(&f.recipePackages, "recipe-packages", "apt:jq", "the recipe environment's packages as comma-separated `MANAGER:SPEC` (apt, pip, npm, go, cargo, gem; the manager's own version syntax); \"\" = none")
	fs.IntVar(&f.failoverRuns, "failover-runs", 3, "SIGKILL failovers to measure")
	fs.DurationVar(&f.leaseTTL, "failover-lease-ttl", 2*time.Second, "--lease-ttl of the two harness processes in the failover section")
	fs.IntVar(&f.workers, "brains", 2500, "in-process brain workers of the servers under test (>= the largest level)")
	fs.StringVar(&f.out, "out", "docs/benchmarks.md", "markdown `file` whose generated section is replaced (\"\" = do not write)")
	fs.StringVar(&f.svg, "svg", "", "SVG chart `file` (default bench.svg beside --out)")
	fs.StringVar(&f.agent, "sandbox-agent", os.Getenv("CORRAL_SANDBOX_AGENT"), "`path` of the in-sandbox agent binary (default: corral-sandbox-agent beside this binary or on PATH, else built static with go build in the source checkout, as the container image ships it, else this binary)")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (server, brains and client are one process) to `file`")
	fs.StringVar(&f.memProfile, "memprofile", "", "write an allocation profile of the whole run to `file` at its end (go tool pprof: -sample_index=alloc_space for what was allocated, inuse_space for what is live at the end)")
	fs.StringVar(&f.blockProfile, "blockprofile", "", "write a profile of where goroutines blocked (channels, selects, locks, waits of 10 µs or more) during the whole run to `file`")
	fs.StringVar(&f.mutexProfile, "mutexprofile", "", "write a profile of contended mutexes (one contention in 10 sampled) during the whole run to `file`")
	fs.StringVar(&f.scaleHeap, "scale-heapprofile", "", "write a heap profile in the middle of each scale level's first try (once every session of the level is in its first turn) to `prefix`-N.pb.gz, N the level; the GC it runs first is in that try's figures")
	fs.StringVar(&f.traceFile, "trace", "", "write an execution trace of the whole run to `file` (go tool trace; -pprof=sched and -pprof=sync show where a turn waits); keep the run short, a trace grows by megabytes a second")
	runscFlag(fs, &f.runsc)
	cpuFlags(fs, &f.cpuShare, &f.cpuIdle)
	startsFlag(fs, &f.starts)
	warmFlag(fs, &f.warm)
	f.kube.register(fs)
	// The recipe section's servers build images and clone as corral serve does with these flags.
	f.images.register(fs)
	f.egress.register(fs)
	if fl := fs.Lookup("image-cache"); fl != nil {
		fl.Usage = "`directory` of the recipe section's images (env CORRAL_IMAGE_CACHE; default corral-bench/images in the user's cache directory, " +
			"so that the base is built once per machine; the section removes the layers none of its servers' environments lists before it measures a build)"
	}
	if fl := fs.Lookup("image-gc"); fl != nil {
		// No periodic collection and no grace: the recipe section collects the cache's unused layers itself.
		f.images.gc = 0
		fl.DefValue = "0s"
		fl.Usage = "how often the recipe servers remove images no environment lists (0 = never, and no grace: the section's own collection before the build removes every unused layer)"
	}
}

// applyQuick lowers the defaults of the flags the command line did not set.
func (f *benchFlags) applyQuick(set map[string]bool) {
	if !f.quick {
		return
	}
	q := map[string]func(){
		"sessions":              func() { f.sessions = "1,10" },
		"samples":               func() { f.samples = 4 },
		"scale":                 func() { f.scale = "50,100" },
		"scale-model-ttft":      func() { f.scaleTTFT = 300 * time.Millisecond },
		"idle-sessions":         func() { f.idleSessions = 100 },
		"history":               func() { f.history = "0,1000" },
		"history-turns":         func() { f.historyTurns = 3 },
		"failover-runs":         func() { f.failoverRuns = 1 },
		"model-ttft":            func() { f.ttft = 100 * time.Millisecond },
		"brains":                func() { f.workers = 200 },
		"recipe-sessions":       func() { f.recipeSessions = "1,10" },
		"recipe-samples":        func() { f.recipeSamples = 4 },
		"recipe-repo-mb":        func() { f.recipeRepoMB = 8 },
		"multiagent-runs":       func() { f.maRuns = 5 },
		"multiagent-rounds":     func() { f.maRounds = 1 },
		"multiagent-model-ttft": func() { f.maTTFT = 300 * time.Millisecond },
		"memory-memories":       func() { f.memCount = 100 },
		"memory-sessions":       func() { f.memSessions = 3 },
		"memory-all-changed":    func() { f.memAll = 1 },
	}
	for name, apply := range q {
		if !set[name] {
			apply()
		}
	}
}

func runBench(ctx context.Context, io *stdio, args []string) error {
	fs := newFlagSet(io, "bench", "[flags]")
	var f benchFlags
	f.register(fs)
	fs.Usage = func() {
		fmt.Fprint(io.err, `Usage: corral bench [flags]

Runs the server corral serve runs (the same assembly; SQLite by default, PostgreSQL with --db) on 127.0.0.1
against a fake model server of configurable latency and real sandboxes, and compares the decoupled design
(lazy hands) with the coupled one (the sandbox provisioned before the first model call, as serve
--eager-hands does). Sections:
  ttft      time to first token as a client sees it, and platform overhead, per backend, mode and concurrency
  hands     provision / ready / execute latency per backend
  log       appends per second through the API; SSE delivery to 1, 10, 100 and 1,000 subscribers of one session (and the POST's own round trip)
  history   a turn's platform overhead in a session whose log already holds --history events (earlier turns,
            filled through the store), --history-turns turns at each level
  scale     the most concurrent active sessions with p95 platform overhead under 50 ms
  idle      memory, goroutines and sandboxes held by idle sessions
  multiagent  multi-agent sessions (issue 22) on the first backend: a coordinator's start_thread answer to the
            child's first model request, against a single-agent session's next request after a bash call
            (--multiagent-runs each); one coordinator answer starting --multiagent-children children (each a
            bash call and a short answer): their start, their next request after the call, and the wall time
            until every child reported back (--multiagent-rounds sessions, fake model TTFT
            --multiagent-model-ttft)
  failover  SIGKILL of a 'corral harness' process to the session resumed in another (PostgreSQL)
  cpu       overhead of talk-only sessions alone and beside 4 sandboxes running busy loops (not run by
            default; compare --sandbox-cpu-share -1, the default and --sandbox-cpu-idle)
  recipe    the recipe paid: sessions of an environment with packages (--recipe-packages, built into an
            image first) each cloning a repository (--recipe-repo-mb of history) from a git server over TLS
            on 127.0.0.1; TTFT and the first tool result, decoupled vs coupled, on the first backend; the
            image build time and a provision on the built image against one without packages (not run by
            default)
  memory    memory stores (issue 24), on every backend: a store of --memory-memories memories (about 1 KiB each,
            in a tree of directories) mounted read_write in sessions created through the API; the first tool
            call's provisioning and the placer's own time with the store against without (--memory-sessions
            each, alternating), the collector's own time at the end of a turn that changed nothing, 10 files or
            every file (--memory-all-changed sessions), and the placement in a new sandbox of the same session,
            which only syncs (not run by default)
Progress goes to stderr, the summary table to stdout, the report to --out (its generated section) and --svg.
The defaults take under 10 minutes on 2 vCPUs; --quick takes seconds.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	f.applyQuick(set)
	// Every flag is checked before a profile file is created.
	cfg, err := f.config(io, args)
	if err != nil {
		return err
	}
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	for _, p := range []struct {
		file, name string
		on         func()
	}{
		{f.memProfile, "allocs", func() {}},
		{f.blockProfile, "block", func() { runtime.SetBlockProfileRate(int((10 * time.Microsecond).Nanoseconds())) }},
		{f.mutexProfile, "mutex", func() { runtime.SetMutexProfileFraction(10) }},
	} {
		if p.file == "" {
			continue
		}
		pf, err := os.Create(p.file)
		if err != nil {
			return err
		}
		defer pf.Close()
		p.on()
		defer func() {
			if err := pprof.Lookup(p.name).WriteTo(pf, 0); err != nil {
				fmt.Fprintf(io.err, "corral bench: %s profile: %v\n", p.name, err)
			}
		}()
	}
	if f.traceFile != "" {
		tf, err := os.Create(f.traceFile)
		if err != nil {
			return err
		}
		defer tf.Close()
		if err := trace.Start(tf); err != nil {
			return err
		}
		defer trace.Stop()
	}
	return bench.Run(ctx, cfg)
}

// config maps the flags to the benchmark's config.
func (f *benchFlags) config(io *stdio, args []string) (bench.Config, error) {
	sessions, err := intList(f.sessions, 1)
	if err != nil {
		return bench.Config{}, fmt.Errorf("--sessions: %w", err)
	}
	scale, err := intList(f.scale, 1)
	if err != nil {
		return bench.Config{}, fmt.Errorf("--scale: %w", err)
	}
	history, err := intList(f.history, 0)
	if err != nil {
		return bench.Config{}, fmt.Errorf("--history: %w", err)
	}
	if f.historyTurns <= 0 {
		return bench.Config{}, errors.New("--history-turns must be positive")
	}
	recipeSessions, err := intList(f.recipeSessions, 1)
	if err != nil {
		return bench.Config{}, fmt.Errorf("--recipe-sessions: %w", err)
	}
	packages, err := packageList(f.recipePackages)
	if err != nil {
		return bench.Config{}, fmt.Errorf("--recipe-packages: %w", err)
	}
	if f.recipeSamples <= 0 || f.recipeRepoMB <= 0 {
		return bench.Config{}, errors.New("--recipe-samples and --recipe-repo-mb must be positive")
	}
	if f.memCount <= 0 || f.memCount > workspace.MaxMountedMemories || f.memSessions <= 0 || f.memAll < 0 || f.memAll > f.memSessions {
		return bench.Config{}, fmt.Errorf("--memory-memories must be in 1..%d, --memory-sessions positive, --memory-all-changed in 0..--memory-sessions", workspace.MaxMountedMemories)
	}
	if f.maRuns <= 0 || f.maChildren <= 0 || f.maRounds <= 0 || f.maTTFT < 0 {
		return bench.Config{}, errors.New("--multiagent-runs, --multiagent-children and --multiagent-rounds must be positive, --multiagent-model-ttft not negative")
	}
	sections := splitList(f.sections)
	for _, s := range sections {
		if !slices.Contains(bench.Sections, s) {
			return bench.Config{}, fmt.Errorf("--sections: unknown section %q (want %s)", s, strings.Join(bench.Sections, ", "))
		}
	}
	exe, err := os.Executable()
	if err != nil {
		return bench.Config{}, err
	}
	return bench.Config{
		Args: args, Quick: f.quick, DB: f.db, FailoverDB: f.failoverDB,
		FailoverFallback: cmp.Or(os.Getenv("CORRAL_TEST_POSTGRES"), defaultFailoverDB),
		Backends: func(root string) ([]bench.Backend, error) {
			agentPath, err := f.agentPath(io, root)
			if err != nil {
				return nil, err
			}
			want := splitList(f.backends)
			if len(want) == 0 {
				want = []string{"bwrap", "oci", "gvisor"}
			}
			return benchBackends(want, backendOptions{agentPath: agentPath, runsc: f.runsc, cpuShare: f.cpuShare, cpuIdle: f.cpuIdle, warm: warmConfig(f.warm), kube: &f.kube}, f.starts), nil
		},
		OpenStore: openStore,
		Model: func(baseURL string, hc *http.Client) model.Model {
			return anthropic.New(anthropic.Config{APIKey: "bench", BaseURL: baseURL, HTTPClient: hc})
		},
		Brain:    defaultBrainConfig(),
		Sessions: sessions, Samples: f.samples, GvisorMax: f.gvisorMax, ToolShare: f.toolShare,
		ModelTTFT: f.ttft, ModelPerToken: f.perToken, ModelJitter: f.jitter,
		Scale: scale, ScaleTTFT: f.scaleTTFT, ScalePerSlot: f.scalePerSlot, ScaleHeapProfile: f.scaleHeap, IdleSessions: f.idleSessions,
		IdleHeapProfile: f.idleHeap, HistoryEvents: history, HistoryTurns: f.historyTurns,
		Sections: sections, FailoverRuns: f.failoverRuns, FailoverLeaseTTL: f.leaseTTL, Workers: f.workers,
		Out: f.out, SVG: f.svg, CPUShare: f.cpuShare, CPUIdle: f.cpuIdle, Warm: f.warm,
		Recipe: f.recipeParts(io), RecipeSessions: recipeSessions, RecipeSamples: f.recipeSamples,
		RecipeRepoBytes: f.recipeRepoMB << 20, RecipePackages: packages,
		MultiagentRuns: f.maRuns, MultiagentChildren: f.maChildren, MultiagentRounds: f.maRounds, MultiagentTTFT: f.maTTFT,
		MemoryPlacer: memoryPlacer, MemoryCount: f.memCount, MemorySessions: f.memSessions, MemoryAllChanged: f.memAll,
		Sealer: func(ctx context.Context, st store.Store) (api.Sealer, error) {
			return vault.Open(ctx, st, vault.NewKey())
		},
		Executable: exe,
		// The failover section's harness processes share one store, so they share its vault master key.
		Environ: append(os.Environ(), "CORRAL_VAULT_KEY="+vault.NewKey().Encode()),
		Stdout:  io.out, Stderr: io.err,
	}, nil
}

// agentPath finds the in-sandbox agent as serve does (this binary doubles as it; a copy goes under root), or,
// in a test binary, builds corral-sandbox-agent from the source checkout.
func (f *benchFlags) agentPath(io *stdio, root string) (string, error) {
	if f.agentResolved != "" {
		return f.agentResolved, nil
	}
	p, err := f.findAgent(io, root)
	f.agentResolved = p
	return p, err
}

// findAgent finds the agent as the image ships it: --sandbox-agent, else corral-sandbox-agent beside this binary
// or on PATH, else built from the source checkout, else (outside one) this binary as serve would copy it.
func (f *benchFlags) findAgent(io *stdio, root string) (string, error) {
	if f.agent != "" {
		return filepath.Abs(f.agent)
	}
	if p, ok := installedAgent(); ok {
		return p, nil
	}
	src := ""
	for _, dir := range []string{"cmd/corral-sandbox-agent", "../corral-sandbox-agent"} {
		if _, err := os.Stat(dir); err == nil {
			src = "./" + dir
		}
	}
	if src == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", err
		}
		if strings.HasSuffix(filepath.Base(exe), ".test") {
			return "", errors.New("corral-sandbox-agent not found (pass --sandbox-agent)")
		}
		fmt.Fprintln(io.err, "corral bench: "+selfAgentNote)
		p, _, err := (&handsFlags{}).agentPath(root) // dynamically linked: fine for bwrap and runc, not for gVisor
		return p, err
	}
	out := filepath.Join(root, "bin", "corral-sandbox-agent")
	fmt.Fprintln(io.err, "corral bench: building corral-sandbox-agent")
	cmd := exec.Command("go", "build", "-o", out, src)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build corral-sandbox-agent: %v: %s", err, msg)
	}
	return out, os.Chmod(filepath.Dir(out), 0o711)
}

func splitList(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// intList parses comma-separated levels, each at least least.
func intList(s string, least int) ([]int, error) {
	var out []int
	for _, p := range splitList(s) {
		n, err := strconv.Atoi(p)
		if err != nil || n < least {
			return nil, fmt.Errorf("bad level %q", p)
		}
		out = append(out, n)
	}
	return out, nil
}

// recipeParts builds the recipe section's server parts as corral serve builds them with --egress-ca-file and
// --egress-allow-internal naming the benchmark's git server besides the flags' own: the workspace placer
// clones over https, pinned to the addresses the egress rules allow, trusting the server's CA; and the image
// service of --images, on --image-cache (default the user's cache directory, corral-bench/images, so that the
// base is built once per machine).
func (f *benchFlags) recipeParts(io *stdio) func(bench.RecipeGit) (bench.RecipeParts, error) {
	return func(git bench.RecipeGit) (bench.RecipeParts, error) {
		eo, err := f.egress.parse()
		if err != nil {
			return bench.RecipeParts{}, err
		}
		ca := append(append([]byte(nil), eo.CAPEM...), git.CAPEM...)
		placer, err := workspace.New(workspace.Config{Resolve: proxy.Resolver(append(eo.AllowInternal, git.HostPort)),
			Path: os.Getenv("PATH"), ExtraRootCAsPEM: ca})
		if err != nil {
			return bench.RecipeParts{}, err
		}
		agentPath, err := f.agentPath(io, git.Root)
		if err != nil {
			return bench.RecipeParts{}, err
		}
		cache, err := os.UserCacheDir()
		if err != nil {
			return bench.RecipeParts{}, err
		}
		dataDir := filepath.Join(cache, "corral-bench")
		hf := &handsFlags{kind: git.Backend, agent: agentPath, egress: f.egress}
		logger := slog.New(slog.NewTextHandler(io.err, &slog.HandlerOptions{Level: slog.LevelWarn}))
		return bench.RecipeParts{Placer: placer, Images: func(st store.Store) (corral.Images, error) {
			return f.images.images(dataDir, hf, st, logger)
		}}, nil
	}
}

// memoryPlacer is the memory section's workspace placer on a server's store, as corral serve wires it: memory
// stores mounted from, and the agents' changes written back into, the store.
func memoryPlacer(ms store.MemoryStore) (bench.MemoryPlacer, error) {
	return workspace.New(workspace.Config{Path: os.Getenv("PATH"), Memories: memstore.New(ms)})
}

// packageList parses "MANAGER:SPEC,..." into an environment's packages; "" is none (nil).
func packageList(s string) (*apitype.Packages, error) {
	items := splitList(s)
	if len(items) == 0 {
		return nil, nil
	}
	p := &apitype.Packages{Type: apitype.PackagesList}
	lists := map[string]*[]string{"apt": &p.Apt, "pip": &p.Pip, "npm": &p.Npm, "go": &p.Go, "cargo": &p.Cargo, "gem": &p.Gem}
	for _, it := range items {
		m, spec, ok := strings.Cut(it, ":")
		l := lists[m]
		if !ok || spec == "" || l == nil {
			return nil, fmt.Errorf("%q: want MANAGER:SPEC with MANAGER one of apt, pip, npm, go, cargo, gem", it)
		}
		*l = append(*l, spec)
	}
	return p, nil
}
