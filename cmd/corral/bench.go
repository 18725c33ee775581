package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/bench"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/model/anthropic"
	"github.com/corralhq/corral/internal/model/fakemodel"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/bwrap"
	"github.com/corralhq/corral/internal/sandbox/gvisor"
	"github.com/corralhq/corral/internal/sandbox/oci"
	"github.com/corralhq/corral/internal/sandbox/process"
	"github.com/corralhq/corral/internal/store"
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
}

const defaultFailoverDB = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

func (f *benchFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.quick, "quick", false, "a fast smoke run (seconds): fewer sessions, samples and levels; the flags below still override it")
	fs.StringVar(&f.db, "db", "", "store `URL` of the servers under test: postgres://... (each run in a fresh schema); default a fresh SQLite file per server")
	fs.StringVar(&f.failoverDB, "failover-db", "", "PostgreSQL `URL` for the failover section (default: --db if it is postgres, else $CORRAL_TEST_POSTGRES or "+defaultFailoverDB+", when it answers)")
	fs.StringVar(&f.backends, "backends", "", "comma-separated sandbox `backends` to compare: bwrap, oci, gvisor, process (default: bwrap, oci and gvisor, those that run here)")
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
	fs.IntVar(&f.idleSessions, "idle-sessions", 1000, "idle sessions created to measure memory per idle session")
	fs.StringVar(&f.sections, "sections", "ttft,hands,log,scale,idle,failover", "comma-separated `sections` to run")
	fs.IntVar(&f.failoverRuns, "failover-runs", 3, "SIGKILL failovers to measure")
	fs.DurationVar(&f.leaseTTL, "failover-lease-ttl", 2*time.Second, "--lease-ttl of the two harness processes in the failover section")
	fs.IntVar(&f.workers, "brains", 2500, "in-process brain workers of the servers under test (>= the largest level)")
	fs.StringVar(&f.out, "out", "docs/benchmarks.md", "markdown `file` whose generated section is replaced (\"\" = do not write)")
	fs.StringVar(&f.svg, "svg", "", "SVG chart `file` (default bench.svg beside --out)")
	fs.StringVar(&f.agent, "sandbox-agent", os.Getenv("CORRAL_SANDBOX_AGENT"), "`path` of corral-sandbox-agent (default: beside this binary, on PATH, else built with go build)")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (server, brains and client are one process) to `file`")
	fs.StringVar(&f.runsc, "runsc", cmp.Or(os.Getenv("CORRAL_RUNSC"), "runsc"), "runsc `binary` for the gvisor backend (env CORRAL_RUNSC; /opt/corral-runsc/runsc is tried too)")
}

// applyQuick lowers the defaults of the flags the command line did not set.
func (f *benchFlags) applyQuick(set map[string]bool) {
	if !f.quick {
		return
	}
	q := map[string]func(){
		"sessions":         func() { f.sessions = "1,10" },
		"samples":          func() { f.samples = 4 },
		"scale":            func() { f.scale = "50,100" },
		"scale-model-ttft": func() { f.scaleTTFT = 300 * time.Millisecond },
		"idle-sessions":    func() { f.idleSessions = 100 },
		"failover-runs":    func() { f.failoverRuns = 1 },
		"model-ttft":       func() { f.ttft = 100 * time.Millisecond },
		"brains":           func() { f.workers = 200 },
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

Runs a real Corral server (SQLite by default, PostgreSQL with --db) on 127.0.0.1 against a fake model server of
configurable latency and real sandboxes, and compares the decoupled design (lazy hands) with the coupled one
(the sandbox provisioned before the first model call, as serve --eager-hands does). Sections:
  ttft      time to first token as a client sees it, and platform overhead, per backend, mode and concurrency
  hands     provision / ready / execute latency per backend
  log       appends per second through the API; SSE delivery latency to 100 subscribers of one session
  scale     the most concurrent active sessions with p95 platform overhead under 50 ms
  idle      memory, goroutines and sandboxes held by idle sessions
  failover  SIGKILL of a 'corral harness' process to the session resumed in another (PostgreSQL)
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
	return (&benchRun{f: &f, io: io, args: args}).run(ctx)
}

// benchRun is one corral bench invocation.
type benchRun struct {
	f    *benchFlags
	io   *stdio
	args []string
	root string // temp dir: stores, workspaces, sandbox state
	rep  bench.Report
	fake *fakeModel
	pg   *pgSchemas // fresh schemas created for --db postgres
}

func (b *benchRun) progress(format string, args ...any) {
	fmt.Fprintf(b.io.err, "[%s] "+format+"\n", append([]any{time.Since(b.rep.Started).Round(time.Second)}, args...)...)
}

func (b *benchRun) run(ctx context.Context) error {
	f := b.f
	b.rep = bench.Report{
		Started: time.Now(), Command: "corral bench " + strings.Join(b.args, " "), Workers: f.workers,
		ModelTTFT: f.ttft, ModelPerToken: f.perToken, ModelJitter: f.jitter, ToolShare: f.toolShare,
		PerSlot: map[int]int{}, Machine: machine(), ScaleModelTTFT: f.scaleTTFT, ScalePerSlot: f.scalePerSlot,
	}
	b.rep.Command = strings.TrimSpace(b.rep.Command)
	load0 := loadAvg()
	sections := map[string]bool{}
	for _, s := range splitList(f.sections) {
		sections[s] = true
	}
	root, err := os.MkdirTemp("", "corral-bench-")
	if err != nil {
		return err
	}
	b.root = root
	defer os.RemoveAll(root)
	// Sandboxes run as their own uids and must reach their workspaces under root.
	if err := os.Chmod(root, 0o711); err != nil {
		return err
	}
	if strings.HasPrefix(f.db, "postgres") {
		b.pg = &pgSchemas{base: f.db}
		defer b.pg.dropAll()
		b.rep.Store = "PostgreSQL (" + redact(f.db) + ", a fresh schema per server)"
	} else if f.db != "" {
		return fmt.Errorf("--db: want a postgres:// URL (the default is a fresh SQLite file per server)")
	} else {
		b.rep.Store = "SQLite (a fresh file per server, WAL, synchronous=FULL)"
	}

	b.fake, err = startFake(f.ttft, f.perToken, f.jitter)
	if err != nil {
		return err
	}
	defer b.fake.srv.Close()

	var providers []*benchBackend
	if sections["ttft"] || sections["hands"] || sections["idle"] {
		providers = b.backends()
	}
	b.progress("corral bench: %s; backends %s; fake model TTFT %s + %s/token ± %s", b.rep.Machine, backendNames(providers), f.ttft, f.perToken, f.jitter)

	if sections["hands"] {
		for _, be := range providers {
			if err := b.hands(ctx, be); err != nil {
				b.skip("hands, "+be.name, err.Error())
			}
		}
	}
	if sections["ttft"] {
		for _, be := range providers {
			if err := b.ttft(ctx, be); err != nil {
				b.skip("TTFT, "+be.name, err.Error())
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	if sections["log"] {
		if err := b.log(ctx); err != nil {
			b.skip("log", err.Error())
		}
	}
	if sections["scale"] {
		if err := b.scale(ctx); err != nil {
			b.skip("scale", err.Error())
		}
	}
	if sections["idle"] {
		var be *benchBackend
		if len(providers) > 0 {
			be = providers[0]
		}
		if err := b.idle(ctx, be); err != nil {
			b.skip("idle sessions", err.Error())
		}
	}
	if sections["failover"] {
		if err := b.failover(ctx); err != nil {
			b.skip("failover", err.Error())
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	b.rep.Elapsed = time.Since(b.rep.Started)
	b.rep.Load = load0 + " before, " + loadAvg() + " after (1, 5, 15 min)"
	b.progress("done in %s", b.rep.Elapsed.Round(time.Second))
	b.rep.WriteSummary(b.io.out)
	return b.write()
}

func (b *benchRun) skip(section, reason string) {
	b.progress("%s: not measured: %s", section, reason)
	b.rep.Skipped = append(b.rep.Skipped, section+": "+reason)
}

// write writes the markdown section and the chart.
func (b *benchRun) write() error {
	if b.f.out == "" {
		return nil
	}
	if _, err := os.Stat(filepath.Dir(b.f.out)); err != nil {
		b.progress("not writing the report: %v (run from the source checkout, or pass --out)", err)
		return nil
	}
	svgPath := cmp.Or(b.f.svg, filepath.Join(filepath.Dir(b.f.out), "bench.svg"))
	rel, err := filepath.Rel(filepath.Dir(b.f.out), svgPath)
	if err != nil {
		rel = svgPath
	}
	if err := os.WriteFile(svgPath, []byte(b.rep.SVG()), 0o644); err != nil {
		return err
	}
	doc, err := os.ReadFile(b.f.out)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if len(doc) == 0 {
		doc = []byte("# Benchmarks\n")
	}
	out := bench.Splice(string(doc), b.rep.Markdown(filepath.ToSlash(rel)))
	if err := os.WriteFile(b.f.out, []byte(out), 0o644); err != nil {
		return err
	}
	b.progress("wrote %s and %s", b.f.out, svgPath)
	return nil
}

// benchBackend is one sandbox backend under test.
type benchBackend struct {
	name string
	new  func(stateDir string) (sandbox.Provider, error)
}

func backendNames(bs []*benchBackend) string {
	var names []string
	for _, b := range bs {
		names = append(names, b.name)
	}
	return cmp.Or(strings.Join(names, ", "), "none")
}

// backends returns the backends to compare, skipping (with a reason) those that cannot run here.
func (b *benchRun) backends() []*benchBackend {
	f := b.f
	agentPath, err := b.agentPath()
	if err != nil {
		b.skip("sandboxes", err.Error())
		return nil
	}
	want := splitList(f.backends)
	explicit := len(want) > 0
	if !explicit {
		want = []string{"bwrap", "oci", "gvisor"}
	}
	var out []*benchBackend
	for _, name := range want {
		be := &benchBackend{name: name}
		var why string
		switch name {
		case "bwrap":
			if _, err := exec.LookPath("bwrap"); err != nil {
				why = "bwrap is not installed"
			} else if os.Geteuid() != 0 {
				why = "bwrap sandboxes need root (uid ranges, cgroups)"
			}
			be.new = func(dir string) (sandbox.Provider, error) {
				return bwrap.New(bwrap.Config{AgentPath: agentPath, StateDir: dir})
			}
		case "oci", "runc":
			be.name = "oci"
			if _, err := exec.LookPath("runc"); err != nil {
				why = "runc is not installed"
			} else if os.Geteuid() != 0 {
				why = "runc needs root"
			}
			be.new = func(dir string) (sandbox.Provider, error) {
				return oci.New(oci.Config{AgentPath: agentPath, StateDir: dir, RuntimeRoot: filepath.Join(dir, "runtime")})
			}
		case "gvisor", "runsc":
			be.name = "gvisor"
			runsc := f.runsc
			if _, err := exec.LookPath(runsc); err != nil {
				if _, err := os.Stat("/opt/corral-runsc/runsc"); err == nil && runsc == "runsc" {
					runsc = "/opt/corral-runsc/runsc"
				}
			}
			if err := gvisor.Available(runsc); err != nil {
				why = err.Error()
			} else if os.Geteuid() != 0 {
				why = "runsc needs root"
			}
			be.new = func(dir string) (sandbox.Provider, error) {
				return gvisor.New(gvisor.Config{Runsc: runsc, OCI: oci.Config{AgentPath: agentPath, StateDir: dir, RuntimeRoot: filepath.Join(dir, "runtime")}})
			}
		case "process":
			be.new = func(dir string) (sandbox.Provider, error) { return process.New(process.Config{AgentPath: agentPath}) }
		default:
			why = "unknown backend (want bwrap, oci, gvisor or process)"
		}
		if why != "" {
			b.skip("backend "+be.name, why)
			continue
		}
		// A provider that cannot start a sandbox here is skipped, not fatal.
		if err := b.probe(be); err != nil {
			b.skip("backend "+be.name, err.Error())
			continue
		}
		out = append(out, be)
	}
	return out
}

// probe starts and stops one sandbox of the backend.
func (b *benchRun) probe(be *benchBackend) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := b.runHands(ctx, be, "probe-", 1, 1)
	return err
}

// runHands runs n sandboxes of calls each, one at a time, on a fresh provider of the backend with a directory
// of its own (prefix + the backend's name).
func (b *benchRun) runHands(ctx context.Context, be *benchBackend, prefix string, n, calls int) (bench.HandsResult, error) {
	dir, err := b.mkdir(prefix + be.name)
	if err != nil {
		return bench.HandsResult{}, err
	}
	prov, err := be.new(filepath.Join(dir, "state"))
	if err != nil {
		return bench.HandsResult{}, err
	}
	defer closeProvider(prov)
	return bench.RunHands(ctx, prov, filepath.Join(dir, "ws"), n, calls)
}

func closeProvider(p sandbox.Provider) {
	if c, ok := p.(interface{ Close() error }); ok {
		_ = c.Close()
	}
}

func (b *benchRun) mkdir(name string) (string, error) {
	dir := filepath.Join(b.root, name)
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return "", err
	}
	return dir, os.Chmod(dir, 0o711)
}

// agentPath finds the in-sandbox agent as serve does (this binary doubles as it), or, in a test binary, builds
// corral-sandbox-agent from the source checkout.
func (b *benchRun) agentPath() (string, error) {
	hf := handsFlags{agent: b.f.agent}
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	if b.f.agent != "" || (!strings.HasSuffix(filepath.Base(exe), ".test") && !dynamic(exe)) {
		return hf.agentPath(b.root)
	}
	src := ""
	for _, dir := range []string{"cmd/corral-sandbox-agent", "../corral-sandbox-agent"} {
		if _, err := os.Stat(dir); err == nil {
			src = "./" + dir
		}
	}
	if src == "" {
		if !strings.HasSuffix(filepath.Base(exe), ".test") {
			return hf.agentPath(b.root) // dynamically linked: fine for bwrap and runc, not for gVisor
		}
		return "", errors.New("corral-sandbox-agent not found (pass --sandbox-agent)")
	}
	out := filepath.Join(b.root, "bin", "corral-sandbox-agent")
	b.progress("building corral-sandbox-agent")
	cmd := exec.Command("go", "build", "-o", out, src)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build corral-sandbox-agent: %v: %s", err, msg)
	}
	return out, os.Chmod(filepath.Dir(out), 0o711)
}

// openStore opens a fresh store for one server.
func (b *benchRun) openStore(ctx context.Context, name string) (store.Store, error) {
	if b.pg != nil {
		u, err := b.pg.fresh(ctx)
		if err != nil {
			return nil, err
		}
		return openStore(ctx, u)
	}
	dir, err := b.mkdir("db-" + name)
	if err != nil {
		return nil, err
	}
	return openStore(ctx, "sqlite://"+filepath.Join(dir, "corral.db"))
}

// server is a server under test with its store and hands.
type benchServer struct {
	*bench.Server
	st   store.Store
	pool *sandbox.Pool
	prov sandbox.Provider
}

func (s *benchServer) close() {
	s.Server.Close()
	if s.pool != nil {
		_ = s.pool.Stop()
	}
	closeProvider(s.prov)
	_ = s.st.Close()
}

// startServer starts an in-process server: a fresh store, the backend's pool (idle sandboxes reaped after
// idle), brains unless noBrain.
func (b *benchRun) startServer(ctx context.Context, name string, fake *fakeModel, be *benchBackend, eager, noBrain bool, idle time.Duration, wrap ...func(store.Store) store.Store) (*benchServer, error) {
	st, err := b.openStore(ctx, name)
	if err != nil {
		return nil, err
	}
	s := &benchServer{st: st}
	served := st
	for _, w := range wrap {
		served = w(served)
	}
	if be != nil {
		dir, err := b.mkdir("hands-" + name)
		if err != nil {
			st.Close()
			return nil, err
		}
		if s.prov, err = be.new(filepath.Join(dir, "state")); err != nil {
			st.Close()
			return nil, err
		}
		s.pool, err = sandbox.NewPool(sandbox.PoolConfig{Provider: s.prov, WorkspaceRoot: filepath.Join(dir, "workspaces"), IdleTimeout: idle})
		if err != nil {
			closeProvider(s.prov)
			st.Close()
			return nil, err
		}
	}
	s.Server, err = bench.StartServer(ctx, bench.ServerConfig{
		Store: served, Model: fake.mdl, Hands: s.pool, EagerHands: eager, NoBrain: noBrain, Workers: b.f.workers,
		LeaseTTL: 10 * time.Second, PollInterval: time.Second,
		Logger: slog.New(slog.NewTextHandler(b.io.err, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		if s.pool != nil {
			_ = s.pool.Stop()
		}
		closeProvider(s.prov)
		st.Close()
		return nil, err
	}
	return s, nil
}

// setup creates the agent (with the built-in toolset) and environment every session of a server uses.
func setup(ctx context.Context, c *bench.Client) (agentID, envID string, err error) {
	if agentID, err = c.CreateAgent(ctx, "bench", true); err != nil {
		return "", "", err
	}
	envID, err = c.CreateEnvironment(ctx, "bench")
	return agentID, envID, err
}

func (b *benchRun) hands(ctx context.Context, be *benchBackend) error {
	n, calls := 20, 20
	if be.name == "gvisor" {
		n = 8
	}
	if b.f.quick {
		n, calls = 3, 5
	}
	b.progress("hands: %s, %d sandboxes one at a time", be.name, n)
	res, err := b.runHands(ctx, be, "handsbench-", n, calls)
	if err != nil {
		return err
	}
	b.progress("hands: %s provision p50 %s ms, ready p50 %s ms, execute p50 %s ms", be.name, bench.Ms(res.Provision.P50), bench.Ms(res.Ready.P50), bench.Ms(res.Exec.P50))
	b.rep.Hands = append(b.rep.Hands, res)
	return nil
}

// ttft runs the TTFT comparison on one backend: both modes at every level.
func (b *benchRun) ttft(ctx context.Context, be *benchBackend) error {
	levels, err := intList(b.f.sessions)
	if err != nil {
		return fmt.Errorf("--sessions: %w", err)
	}
	for _, mode := range []string{bench.Decoupled, bench.Coupled} {
		s, err := b.startServer(ctx, "ttft-"+be.name+"-"+mode, b.fake, be, mode == bench.Coupled, false, 5*time.Second)
		if err != nil {
			return err
		}
		err = func() error {
			defer s.close()
			c := s.Client()
			defer c.CloseIdle()
			agentID, envID, err := setup(ctx, c)
			if err != nil {
				return err
			}
			for _, n := range levels {
				if be.name == "gvisor" && n > b.f.gvisorMax {
					b.skipOnce(fmt.Sprintf("TTFT, gvisor at %d sessions", n), fmt.Sprintf("above --gvisor-max %d (each gVisor sandbox takes 0.3-0.5 s of CPU to start)", b.f.gvisorMax))
					continue
				}
				perSlot := max(2, int(math.Ceil(float64(b.f.samples)/float64(n))))
				b.rep.PerSlot[n] = perSlot
				b.progress("ttft: %s %s, %d concurrent sessions × %d each", be.name, mode, n, perSlot)
				t0 := time.Now()
				samples, errs, err := bench.RunTTFT(ctx, c, b.fake, bench.Workload{
					AgentID: agentID, EnvID: envID, Concurrency: n, PerSlot: perSlot, Stagger: b.f.ttft, ToolShare: b.f.toolShare,
				})
				rate := float64(len(samples)) / time.Since(t0).Seconds()
				if err != nil && len(samples) == 0 {
					return err
				}
				if err != nil {
					b.progress("ttft: %d sessions failed; first error: %v", errs, err)
				}
				cell := bench.Cell{Backend: be.name, Mode: mode, Concurrency: n, TTFT: bench.Summarize(bench.TTFTs(samples)),
					Overhead: bench.Summarize(bench.Overheads(samples)), Model: bench.Summarize(bench.Models(samples)), Errors: errs, Rate: rate, Phases: bench.PhaseDists(samples)}
				b.rep.Cells = append(b.rep.Cells, cell)
				b.progress("ttft: %s %s ×%d: TTFT p50 %s p95 %s ms; overhead p50 %s p95 %s ms", be.name, mode, n,
					bench.Ms(cell.TTFT.P50), bench.Ms(cell.TTFT.P95), bench.Ms(cell.Overhead.P50), bench.Ms(cell.Overhead.P95))
			}
			return nil
		}()
		if err != nil {
			return err
		}
	}
	return nil
}

func (b *benchRun) skipOnce(section, reason string) {
	for _, s := range b.rep.Skipped {
		if strings.HasPrefix(s, section+":") {
			return
		}
	}
	b.skip(section, reason)
}

func (b *benchRun) log(ctx context.Context) error {
	s, err := b.startServer(ctx, "log", b.fake, nil, false, true, 0)
	if err != nil {
		return err
	}
	defer s.close()
	c := s.Client()
	defer c.CloseIdle()
	agentID, envID, err := setup(ctx, c)
	if err != nil {
		return err
	}
	d, events := 5*time.Second, 100
	if b.f.quick {
		d, events = time.Second, 10
	}
	b.progress("log: appends through the API, 32 clients for %s", d)
	res, err := bench.RunAppends(ctx, c, agentID, envID, 32, d)
	if err != nil {
		return err
	}
	b.progress("log: %.0f appends/s", res.AppendsPerSec)
	b.progress("log: SSE fan-out to 100 subscribers, %d events", events)
	res.Subscribers, res.Events = 100, events
	res.Delivery, err = bench.RunFanout(ctx, c, agentID, envID, 100, events, 20*time.Millisecond)
	if err != nil {
		return err
	}
	b.progress("log: delivery p50 %s p95 %s ms", bench.Ms(res.Delivery.P50), bench.Ms(res.Delivery.P95))
	b.rep.Log = &res
	return nil
}

func (b *benchRun) scale(ctx context.Context) error {
	levels, err := intList(b.f.scale)
	if err != nil {
		return fmt.Errorf("--scale: %w", err)
	}
	// Sessions stay active for a model call as long as a real one: a slower fake model of its own.
	fake, err := startFake(b.f.scaleTTFT, b.f.perToken, b.f.jitter)
	if err != nil {
		return err
	}
	defer fake.srv.Close()
	var timed *bench.TimedStore
	s, err := b.startServer(ctx, "scale", fake, nil, false, false, 0, func(st store.Store) store.Store {
		timed = bench.NewTimedStore(st)
		return timed
	})
	if err != nil {
		return err
	}
	defer s.close()
	c := s.Client()
	defer c.CloseIdle()
	agentID, envID, err := setup(ctx, c)
	if err != nil {
		return err
	}
levels:
	for _, n := range levels {
		if n > b.f.workers {
			b.skip(fmt.Sprintf("scale at %d sessions", n), fmt.Sprintf("more than --brains %d", b.f.workers))
			break
		}
		for try := 1; try <= 2; try++ {
			b.progress("scale: %d concurrent active sessions × %d turns each (try %d)", n, b.f.scalePerSlot, try)
			timed.Take()
			t0 := time.Now()
			samples, errs, err := bench.RunTTFT(ctx, c, fake, bench.Workload{
				AgentID: agentID, EnvID: envID, Concurrency: n, PerSlot: b.f.scalePerSlot, Stagger: b.f.scaleTTFT,
			})
			stt := timed.Take()
			rate := float64(len(samples)) / time.Since(t0).Seconds()
			if err != nil && len(samples) == 0 {
				return err
			}
			step := bench.ScaleStep{Sessions: n, Try: try, TTFT: bench.Summarize(bench.TTFTs(samples)), Overhead: bench.Summarize(bench.Overheads(samples)),
				Errors: errs, Rate: rate, Phases: bench.PhaseDists(samples), Store: stt}
			b.rep.Scale = append(b.rep.Scale, step)
			b.progress("scale: %d sessions: overhead p50 %s p95 %s ms, %.0f turns/s, %d errors; store append p95 %s ms, claim p95 %s ms, %d claims (%d sessions)",
				n, bench.Ms(step.Overhead.P50), bench.Ms(step.Overhead.P95), rate, errs, bench.Ms(stt.Append.P95), bench.Ms(stt.Claim.P95), stt.Claims, stt.ClaimsFound)
			if err != nil {
				b.progress("scale: first error: %v", err)
			}
			c.CloseIdle()
			fake.srv.DropRequests()
			if step.Holds() {
				b.rep.ScaleMax = n
				continue levels
			}
		}
		break
	}
	return nil
}

func (b *benchRun) idle(ctx context.Context, be *benchBackend) error {
	s, err := b.startServer(ctx, "idle", b.fake, be, false, false, time.Second)
	if err != nil {
		return err
	}
	defer s.close()
	c := s.Client()
	defer c.CloseIdle()
	agentID, envID, err := setup(ctx, c)
	if err != nil {
		return err
	}
	share := 0.1
	var sandboxes func() int
	if s.pool != nil {
		sandboxes = s.pool.Sessions
	} else {
		share = 0
	}
	b.progress("idle: %d sessions through one turn each, then idle", b.f.idleSessions)
	res, err := bench.RunIdleMemory(ctx, c, b.fake, bench.IdleConfig{
		Workload: bench.Workload{AgentID: agentID, EnvID: envID, Concurrency: 50, ToolShare: share},
		Sessions: b.f.idleSessions, Sandboxes: sandboxes, Settle: 10 * time.Second, Forget: b.fake.srv.DropRequests,
	})
	if err != nil {
		return err
	}
	b.progress("idle: heap %.0f B/session, goroutines %d -> %d, sandboxes left %d", res.HeapPerSession, res.GoroutinesBefore, res.GoroutinesAfter, res.SandboxesLeft)
	b.rep.Memory = &res
	return nil
}

// fakeModel is the scripted model server with per-marker timings.
type fakeModel struct {
	srv *fakemodel.Server
	mdl model.Model
	mu  sync.Mutex
	got map[string]fakemodel.Timing
	new chan struct{} // closed and replaced on each timing
}

// startFake starts a fake model server of the latency, and the Anthropic adapter pointed at it.
func startFake(ttft, perToken, jitter time.Duration) (*fakeModel, error) {
	m := &fakeModel{got: map[string]fakemodel.Timing{}, new: make(chan struct{})}
	srv, err := fakemodel.Start(fakemodel.WithLatency(ttft, perToken, jitter), fakemodel.WithObserver(m.observe))
	if err != nil {
		return nil, err
	}
	m.srv = srv
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 4096, 4096
	m.mdl = anthropic.New(anthropic.Config{APIKey: "bench", BaseURL: srv.URL, HTTPClient: &http.Client{Transport: tr}})
	return m, nil
}

func (m *fakeModel) observe(t fakemodel.Timing) {
	marker := t.Request.LastUserText()
	if !strings.HasPrefix(marker, "bench ") {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.got[marker]; !ok {
		t.Request = nil
		m.got[marker] = t
		close(m.new)
		m.new = make(chan struct{})
	}
}

func (m *fakeModel) ScriptTool(marker, command string) {
	m.srv.Script(fakemodel.Turn{
		ToolUses: []fakemodel.ToolUse{{Name: "bash", Input: fmt.Sprintf(`{"command":%q}`, command)}},
		Match:    func(r *fakemodel.Request) bool { return r.LastUserText() == marker },
	})
}

func (m *fakeModel) ModelTime(ctx context.Context, marker string) (received, done time.Time, err error) {
	for {
		m.mu.Lock()
		t, ok := m.got[marker]
		ch := m.new
		if ok {
			delete(m.got, marker)
		}
		m.mu.Unlock()
		if ok {
			return t.Received, t.Done, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return time.Time{}, time.Time{}, fmt.Errorf("the fake model never answered %q", marker)
		}
	}
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

func intList(s string) ([]int, error) {
	var out []int
	for _, p := range splitList(s) {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad level %q", p)
		}
		out = append(out, n)
	}
	return out, nil
}

func machine() string {
	model := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	s := fmt.Sprintf("%d vCPU", runtime.NumCPU())
	if model != "" {
		s += " " + model
	}
	return s + ", " + runtime.GOOS + "/" + runtime.GOARCH + ", " + runtime.Version()
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// redact drops a URL's password.
func redact(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		if j := strings.Index(u[i+3:], "@"); j >= 0 {
			cred := u[i+3 : i+3+j]
			if k := strings.Index(cred, ":"); k >= 0 {
				return u[:i+3] + cred[:k] + ":***" + u[i+3+j:]
			}
		}
	}
	return u
}
