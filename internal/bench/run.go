package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/harness"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/server"
	"github.com/corralhq/corral/internal/store"
)

// Sections of a run, in the order they run.
var Sections = []string{"ttft", "hands", "log", "history", "scale", "idle", "multiagent", "cpu", "failover", "recipe", "memory", "webhooks"}

// Config is one corral bench run. cmd/corral maps the flags to it; the fields' doc is the flags' help.
type Config struct {
	// Args is the command line, quoted in the report.
	Args  []string
	Quick bool
	// DB is a postgres:// URL under which each server gets a fresh schema; "" gives each a fresh SQLite file.
	DB string
	// FailoverDB is the PostgreSQL of the failover section; "" takes DB if it is PostgreSQL, else
	// FailoverFallback when it answers.
	FailoverDB, FailoverFallback string
	// Backends resolves the sandbox backends to compare (cmd/corral's backend table); root is the run's
	// temporary directory (for a copy of the agent). It is called only when a section needs sandboxes. An
	// error skips every backend with its reason.
	Backends func(root string) ([]Backend, error)
	// OpenStore opens a store by URL (sqlite://PATH or postgres://...). Required.
	OpenStore func(ctx context.Context, url string) (store.Store, error)
	// Model returns the model adapter the brains call, pointed at the fake model's base URL. Required.
	Model func(baseURL string, hc *http.Client) model.Model
	// Brain is the brains' config as corral serve runs it by default; Workers, Model and EagerHands are set
	// per server.
	Brain harness.Config

	Sessions                              []int // concurrent-session levels of the TTFT comparison
	Samples                               int   // TTFT samples per level and mode
	GvisorMax                             int   // highest level run with gvisor
	ToolShare                             float64
	ModelTTFT, ModelPerToken, ModelJitter time.Duration
	Scale                                 []int // levels of the scale search
	ScaleTTFT                             time.Duration
	ScalePerSlot                          int
	// ScaleHeapProfile, if set, is the path prefix of a heap profile written in the middle of each scale level's
	// first try (PREFIX-N.pb.gz, N the level), once every slot is in its first turn: what the live heap holds at
	// that level, by allocation site.
	ScaleHeapProfile string
	IdleSessions     int
	// IdleHeapProfile, if set, is the path prefix of the idle section's two heap profiles, PREFIX-before.pb.gz
	// and PREFIX-after.pb.gz, taken with its two measurements: `go tool pprof -base` of the first shows what the
	// idle sessions hold, by allocation site (run with GODEBUG=memprofilerate=64 or so: the default rate samples
	// one allocation in 512 KiB).
	IdleHeapProfile string
	// HistoryEvents are the history section's levels (events in a session's log before its measured turns),
	// HistoryTurns the turns measured at each.
	HistoryEvents []int
	HistoryTurns  int
	Sections      []string // of Sections
	FailoverRuns  int
	// Recipe builds the recipe section's server parts for its git server (cmd/corral); nil skips the section.
	Recipe func(RecipeGit) (RecipeParts, error)
	// RecipeSessions are the recipe section's concurrency levels, RecipeSamples its samples per level and
	// mode, RecipeRepoBytes the size of its repository's history, RecipePackages its environment's packages
	// (nil: none).
	RecipeSessions   []int
	RecipeSamples    int
	RecipeRepoBytes  int64
	RecipePackages   *apitype.Packages
	FailoverLeaseTTL time.Duration
	// MultiagentRuns is the multiagent section's coordinator sessions starting one child (and single-agent
	// sessions, alternating); MultiagentChildren the children its fan-out's coordinator starts in one answer,
	// MultiagentRounds the fan-out's sessions, MultiagentTTFT the fake model's time to first token in the
	// fan-out (0: ModelTTFT).
	MultiagentRuns, MultiagentChildren, MultiagentRounds int
	MultiagentTTFT                                       time.Duration
	// MemoryPlacer returns the workspace placer (and collector) of the memory section's server on store st, as
	// corral serve wires it (internal/workspace over internal/workspace/memstore); nil skips the section.
	// MemoryCount is the section's store's memories, MemorySessions its sessions of each kind (with the store,
	// without), MemoryAllChanged the sessions with the store, among them, whose second turn changes every file.
	MemoryPlacer                                  func(st store.MemoryStore) (MemoryPlacer, error)
	MemoryCount, MemorySessions, MemoryAllChanged int
	// Sealer opens the vault of a store, for the webhooks section's endpoints' secrets; nil skips the section.
	Sealer   sealerFor
	Workers  int    // in-process brain workers of the servers under test
	CPUShare int    // the backends' --sandbox-cpu-share, for the report
	CPUIdle  bool   // and --sandbox-cpu-idle
	Warm     int    // bwrap's --sandbox-warm, for the report
	Out, SVG string // markdown report (its generated section) and chart; Out "" writes neither

	// Executable is the corral binary the failover section starts as `corral harness`; Environ is their
	// environment (ANTHROPIC_* for the fake model are added).
	Executable string
	Environ    []string
	// Stdout gets the summary table, Stderr the progress.
	Stdout, Stderr io.Writer
}

// Backend is one sandbox backend under test.
type Backend struct {
	Name string
	// Unavailable says why the backend cannot run here; New is nil then.
	Unavailable string
	// New constructs a provider whose state lives under stateDir.
	New func(stateDir string) (sandbox.Provider, error)
	// MaxStarting is the sandbox pool's bound on the sandboxes it starts at once (--sandbox-starts; 0: none).
	MaxStarting int
}

// Run runs the benchmark: the sections of cfg, then the summary to Stdout and the report to Out and SVG.
func Run(ctx context.Context, cfg Config) error {
	switch {
	case cfg.OpenStore == nil, cfg.Model == nil:
		return errors.New("bench: Config.OpenStore and Config.Model are required")
	}
	cfg.Stdout = cmp.Or[io.Writer](cfg.Stdout, io.Discard)
	cfg.Stderr = cmp.Or[io.Writer](cfg.Stderr, io.Discard)
	return (&benchRun{cfg: &cfg}).run(ctx)
}

// benchRun is one corral bench invocation.
type benchRun struct {
	cfg  *Config
	root string // temp dir: stores, workspaces, sandbox state
	rep  Report
	fake *fakeModel
	pg   *pgSchemas // fresh schemas created for --db postgres
}

func (b *benchRun) progress(format string, args ...any) {
	fmt.Fprintf(b.cfg.Stderr, "[%s] "+format+"\n", append([]any{time.Since(b.rep.Started).Round(time.Second)}, args...)...)
}

func (b *benchRun) run(ctx context.Context) error {
	f := b.cfg
	b.rep = Report{
		Started: time.Now(), Command: "corral bench " + strings.Join(f.Args, " "), Workers: f.Workers,
		ModelTTFT: f.ModelTTFT, ModelPerToken: f.ModelPerToken, ModelJitter: f.ModelJitter, ToolShare: f.ToolShare,
		PerSlot: map[int]int{}, Machine: machine(), ScaleModelTTFT: f.ScaleTTFT, ScalePerSlot: f.ScalePerSlot,
		HistoryTurns: f.HistoryTurns,
	}
	b.rep.Command = strings.TrimSpace(b.rep.Command)
	load0 := loadAvg()
	sections := map[string]bool{}
	for _, s := range f.Sections {
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
	if strings.HasPrefix(f.DB, "postgres") {
		b.pg = &pgSchemas{base: f.DB}
		defer b.pg.dropAll()
		b.rep.Store = "PostgreSQL (" + redact(f.DB) + ", a fresh schema per server)"
	} else if f.DB != "" {
		return fmt.Errorf("--db: want a postgres:// URL (the default is a fresh SQLite file per server)")
	} else {
		b.rep.Store = "SQLite (a fresh file per server, WAL, synchronous=FULL)"
	}

	b.fake, err = b.startFake(f.ModelTTFT)
	if err != nil {
		return err
	}
	defer b.fake.close()

	var providers []*benchBackend
	if sections["ttft"] || sections["hands"] || sections["idle"] || sections["multiagent"] || sections["cpu"] || sections["recipe"] || sections["memory"] {
		providers = b.backends()
	}
	b.progress("corral bench: %s; backends %s; fake model TTFT %s + %s/token ± %s", b.rep.Machine, backendNames(providers), f.ModelTTFT, f.ModelPerToken, f.ModelJitter)

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
	if sections["history"] {
		if err := b.history(ctx); err != nil {
			b.skip("history", err.Error())
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
	if sections["multiagent"] {
		// One backend: the figures are the brain's; the children's bash calls share the session's sandbox.
		if len(providers) == 0 {
			b.skip("multiagent", "no sandbox backend runs here")
		} else if err := b.multiagent(ctx, providers[0]); err != nil {
			b.skip("multiagent, "+providers[0].name, err.Error())
		}
	}
	if sections["cpu"] {
		for _, be := range providers {
			if err := b.cpu(ctx, be); err != nil {
				b.skip("cpu, "+be.name, err.Error())
			}
		}
	}
	if sections["failover"] {
		if err := b.failover(ctx); err != nil {
			b.skip("failover", err.Error())
		}
	}
	if sections["recipe"] {
		// One backend: the recipe's clones and images make each level heavy.
		if len(providers) == 0 {
			b.skip("recipe", "no sandbox backend runs here")
		} else if err := b.recipe(ctx, providers[0]); err != nil {
			b.skip("recipe, "+providers[0].name, err.Error())
		}
	}
	if sections["memory"] {
		switch {
		case b.cfg.MemoryPlacer == nil:
			b.skip("memory", "no workspace placer with memory stores (Config.MemoryPlacer)")
		case len(providers) == 0:
			b.skip("memory", "no sandbox backend runs here")
		}
		for _, be := range providers {
			if b.cfg.MemoryPlacer == nil || ctx.Err() != nil {
				break
			}
			if err := b.memstores(ctx, be); err != nil {
				b.skip("memory, "+be.name, err.Error())
			}
		}
	}
	if sections["webhooks"] {
		if err := b.webhooks(ctx); err != nil {
			b.skip("webhooks", err.Error())
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	b.rep.Elapsed = time.Since(b.rep.Started)
	b.rep.Load = load0 + " before, " + loadAvg() + " after (1, 5, 15 min)"
	b.progress("done in %s", b.rep.Elapsed.Round(time.Second))
	b.rep.WriteSummary(b.cfg.Stdout)
	return b.write()
}

func (b *benchRun) skip(section, reason string) {
	b.progress("%s: not measured: %s", section, reason)
	b.rep.Skipped = append(b.rep.Skipped, section+": "+reason)
}

// write writes the markdown section and the chart.
func (b *benchRun) write() error {
	if b.cfg.Out == "" {
		return nil
	}
	if _, err := os.Stat(filepath.Dir(b.cfg.Out)); err != nil {
		b.progress("not writing the report: %v (run from the source checkout, or pass --out)", err)
		return nil
	}
	svgPath := cmp.Or(b.cfg.SVG, filepath.Join(filepath.Dir(b.cfg.Out), "bench.svg"))
	rel, err := filepath.Rel(filepath.Dir(b.cfg.Out), svgPath)
	if err != nil {
		rel = svgPath
	}
	if err := os.WriteFile(svgPath, []byte(b.rep.SVG()), 0o644); err != nil {
		return err
	}
	doc, err := os.ReadFile(b.cfg.Out)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if len(doc) == 0 {
		doc = []byte("# Benchmarks\n")
	}
	out := Splice(string(doc), b.rep.Markdown(filepath.ToSlash(rel)))
	if err := os.WriteFile(b.cfg.Out, []byte(out), 0o644); err != nil {
		return err
	}
	b.progress("wrote %s and %s", b.cfg.Out, svgPath)
	return nil
}

// benchBackend is one sandbox backend under test that runs here.
type benchBackend struct {
	name        string
	new         func(stateDir string) (sandbox.Provider, error)
	maxStarting int
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
	if b.cfg.Backends == nil {
		return nil
	}
	all, err := b.cfg.Backends(b.root)
	if err != nil {
		b.skip("sandboxes", err.Error())
		return nil
	}
	var out []*benchBackend
	for _, be := range all {
		if be.Unavailable != "" || be.New == nil {
			b.skip("backend "+be.Name, cmp.Or(be.Unavailable, "no constructor"))
			continue
		}
		bb := &benchBackend{name: be.Name, new: be.New, maxStarting: be.MaxStarting}
		// A provider that cannot start a sandbox here is skipped, not fatal.
		if err := b.probe(bb); err != nil {
			b.skip("backend "+bb.name, err.Error())
			continue
		}
		out = append(out, bb)
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
func (b *benchRun) runHands(ctx context.Context, be *benchBackend, prefix string, n, calls int) (HandsResult, error) {
	dir, err := b.mkdir(prefix + be.name)
	if err != nil {
		return HandsResult{}, err
	}
	prov, err := be.new(filepath.Join(dir, "state"))
	if err != nil {
		return HandsResult{}, err
	}
	defer closeProvider(prov)
	return RunHands(ctx, prov, filepath.Join(dir, "ws"), n, calls)
}

func closeProvider(p sandbox.Provider) {
	if c, ok := p.(io.Closer); ok {
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

// openStore opens a fresh store for one server.
func (b *benchRun) openStore(ctx context.Context, name string) (store.Store, error) {
	if b.pg != nil {
		u, err := b.pg.fresh(ctx)
		if err != nil {
			return nil, err
		}
		return b.cfg.OpenStore(ctx, u)
	}
	dir, err := b.mkdir("db-" + name)
	if err != nil {
		return nil, err
	}
	return b.cfg.OpenStore(ctx, "sqlite://"+filepath.Join(dir, "corral.db"))
}

// benchServer is a server under test: its store, a client of it, and the agent (with the built-in toolset)
// and environment every session of the server uses.
type benchServer struct {
	*server.Server
	st             store.Store
	images         server.Images // nil: none
	c              *Client
	agentID, envID string
}

func (s *benchServer) close() {
	s.c.CloseIdleConnections()
	s.Server.Stop()
	_ = s.st.Close()
}

// Key is the API key of the benchmark's in-process servers (as CORRAL_API_KEY for serve).
const Key = "corral-bench-key"

// serverSpec is what differs between the servers of a run.
type serverSpec struct {
	fake    *fakeModel    // the model of the server's brains; nil runs no brains (the API alone)
	backend *benchBackend // the sandbox backend of its pool; nil runs no sandbox
	eager   bool          // provision each session's sandbox before its first model call (the coupled design)
	idle    time.Duration // the pool's idle timeout
	wrap    func(store.Store) store.Store
	// packages are the environment's (the recipe workload's); placer places the sessions' resources.
	packages *apitype.Packages
	placer   sandbox.Placer
	outputs  sandbox.Collector                        // collects the sessions' outputs and memory stores (nil: none)
	images   func(store.Store) (server.Images, error) // the server's images (nil: none)
	fleet    *server.FleetConfig                      // the server's fleet jobs (nil: the API's defaults)
}

// startServer starts a server of spec on a fresh store of its own.
func (b *benchRun) startServer(ctx context.Context, name string, spec serverSpec) (*benchServer, error) {
	st, err := b.openStore(ctx, name)
	if err != nil {
		return nil, err
	}
	return b.serve(ctx, name, st, spec)
}

// serve starts an in-process server as corral serve composes it (internal/server) on st, which it closes with
// the server (also on error), and creates the agent and environment of its sessions.
func (b *benchRun) serve(ctx context.Context, name string, st store.Store, spec serverSpec) (_ *benchServer, err error) {
	defer func() {
		if err != nil {
			_ = st.Close()
		}
	}()
	served := st
	if spec.wrap != nil {
		served = spec.wrap(st)
	}
	logger := slog.New(slog.NewTextHandler(b.cfg.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	cfg := server.Config{
		Store: served, Logger: logger,
		API:   &server.APIConfig{Listen: "127.0.0.1:0", Keys: &api.KeyAuth{Store: served, Static: Key}},
		Fleet: spec.fleet,
	}
	if spec.fleet != nil {
		cfg.API.Sealer = spec.fleet.Sealer // the API seals what the fleet's jobs open
	}
	if spec.fake != nil {
		hc := b.cfg.Brain
		hc.Model, hc.Workers, hc.EagerHands = spec.fake.mdl, b.cfg.Workers, spec.eager
		cfg.Brain = &hc
	}
	if be := spec.backend; be != nil {
		dir, err := b.mkdir("hands-" + name)
		if err != nil {
			return nil, err
		}
		prov, err := be.new(filepath.Join(dir, "state"))
		if err != nil {
			return nil, err
		}
		cfg.Sandbox = server.SandboxConfig{Provider: prov, Pool: sandbox.PoolConfig{WorkspaceRoot: filepath.Join(dir, "workspaces"),
			IdleTimeout: spec.idle, Placer: spec.placer, Outputs: spec.outputs, MaxStarting: be.maxStarting}}
	}
	if spec.images != nil {
		if cfg.Images, err = spec.images(served); err != nil {
			return nil, err
		}
	}
	srv, err := server.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := srv.Start(ctx); err != nil {
		return nil, err
	}
	s := &benchServer{Server: srv, st: st, images: cfg.Images, c: NewClient(srv.URL(), Key)}
	if s.agentID, err = s.c.CreateAgent(ctx, "bench", true); err == nil {
		s.envID, err = s.c.CreateEnvironment(ctx, "bench", spec.packages)
	}
	if err != nil {
		s.c.CloseIdleConnections()
		srv.Stop()
		return nil, err
	}
	return s, nil
}

func (b *benchRun) hands(ctx context.Context, be *benchBackend) error {
	n, calls := 20, 20
	if be.name == "gvisor" {
		n = 8
	}
	if b.cfg.Quick {
		n, calls = 3, 5
	}
	b.progress("hands: %s, %d sandboxes one at a time", be.name, n)
	res, err := b.runHands(ctx, be, "handsbench-", n, calls)
	if err != nil {
		return err
	}
	b.progress("hands: %s provision p50 %s ms, ready p50 %s ms, execute p50 %s ms", be.name, Ms(res.Provision.P50), Ms(res.Ready.P50), Ms(res.Exec.P50))
	b.rep.Hands = append(b.rep.Hands, res)
	return nil
}

// ttft runs the TTFT comparison on one backend: both modes at every level.
func (b *benchRun) ttft(ctx context.Context, be *benchBackend) error {
	b.rep.SandboxStarts, b.rep.SandboxWarm = be.maxStarting, b.cfg.Warm
	levels := b.cfg.Sessions
	for _, mode := range []string{Decoupled, Coupled} {
		s, err := b.startServer(ctx, "ttft-"+be.name+"-"+mode, serverSpec{fake: b.fake, backend: be, eager: mode == Coupled, idle: 5 * time.Second})
		if err != nil {
			return err
		}
		err = func() error {
			defer s.close()
			for _, n := range levels {
				if be.name == "gvisor" && n > b.cfg.GvisorMax {
					b.skipOnce(fmt.Sprintf("TTFT, gvisor at %d sessions", n), fmt.Sprintf("above --gvisor-max %d (each gVisor sandbox takes 0.3-0.5 s of CPU to start)", b.cfg.GvisorMax))
					continue
				}
				perSlot := max(2, int(math.Ceil(float64(b.cfg.Samples)/float64(n))))
				b.rep.PerSlot[n] = perSlot
				b.progress("ttft: %s %s, %d concurrent sessions × %d each", be.name, mode, n, perSlot)
				t0 := time.Now()
				samples, errs, err := RunTTFT(ctx, s.c, b.fake, Workload{
					AgentID: s.agentID, EnvID: s.envID, Concurrency: n, PerSlot: perSlot, Stagger: b.cfg.ModelTTFT, ToolShare: b.cfg.ToolShare,
				})
				rate := float64(len(samples)) / time.Since(t0).Seconds()
				if err != nil && len(samples) == 0 {
					return err
				}
				if err != nil {
					b.progress("ttft: %d sessions failed; first error: %v", errs, err)
				}
				cell := Cell{Backend: be.name, Mode: mode, Concurrency: n, TTFT: Summarize(TTFTs(samples)),
					Overhead: Summarize(Overheads(samples)), Model: Summarize(Models(samples)), Errors: errs, Rate: rate, Phases: PhaseDists(samples),
					ToolResult: Summarize(ToolResults(samples))}
				b.rep.Cells = append(b.rep.Cells, cell)
				tools := ""
				if cell.ToolResult.N > 0 {
					tools = fmt.Sprintf("; first tool result p50 %s p95 %s ms", Ms(cell.ToolResult.P50), Ms(cell.ToolResult.P95))
				}
				b.progress("ttft: %s %s ×%d: TTFT p50 %s p95 %s ms; overhead p50 %s p95 %s ms%s", be.name, mode, n,
					Ms(cell.TTFT.P50), Ms(cell.TTFT.P95), Ms(cell.Overhead.P50), Ms(cell.Overhead.P95), tools)
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
	s, err := b.startServer(ctx, "log", serverSpec{})
	if err != nil {
		return err
	}
	defer s.close()
	d, events := 5*time.Second, 100
	if b.cfg.Quick {
		d, events = time.Second, 10
	}
	b.progress("log: appends through the API, 32 clients for %s", d)
	res, err := RunAppends(ctx, s.c, s.st, s.agentID, s.envID, 32, d)
	if err != nil {
		return err
	}
	b.progress("log: %.0f appends/s (POST p50 %s p99 %s ms)%s", res.AppendsPerSec, Ms(res.AppendLatency.P50), Ms(res.AppendLatency.P99), commitNote(res))
	// The goal's 100 subscribers, and the curve around it.
	res.Subscribers, res.Events = 100, events
	levels := []int{1, 10, 100, 1000}
	if b.cfg.Quick {
		levels = []int{1, 100}
	}
	for _, n := range levels {
		b.progress("log: SSE fan-out to %d subscribers, %d events", n, events)
		var lv FanoutLevel
		lv.Subscribers = n
		lv.Delivery, lv.Ack, err = RunFanout(ctx, s.c, s.agentID, s.envID, n, events, 20*time.Millisecond)
		if err != nil {
			return err
		}
		b.progress("log: delivery p50 %s p95 %s p99 %s ms (the POST's ack p50 %s p99 %s)", Ms(lv.Delivery.P50), Ms(lv.Delivery.P95),
			Ms(lv.Delivery.P99), Ms(lv.Ack.P50), Ms(lv.Ack.P99))
		res.Curve = append(res.Curve, lv)
		if n == res.Subscribers {
			res.Delivery, res.Ack = lv.Delivery, lv.Ack
		}
	}
	b.rep.Log = &res
	return nil
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

// redact hides a URL's password.
func redact(u string) string {
	if p, err := url.Parse(u); err == nil && p.User != nil {
		return p.Redacted()
	}
	return u
}
