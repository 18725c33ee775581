package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Modes of the TTFT comparison.
const (
	Decoupled = "decoupled" // lazy hands: the sandbox is provisioned at the first tool call
	Coupled   = "coupled"   // eager hands: provisioned and ready before the first model call
)

// Cell is one TTFT measurement: a backend, a mode and a concurrency.
type Cell struct {
	Backend     string
	Mode        string
	Concurrency int
	TTFT        Dist
	Overhead    Dist
	Model       Dist
	Errors      int
	// Rate is the sessions completed per second over the cell's wall time: the load the server sustained.
	Rate float64
	// Phases splits the overhead (see PhaseNames).
	Phases [NumPhases]Dist
	// ToolResult is the tool sessions' time from the send to their first tool result: what a session that needs
	// its sandbox waits, its start included.
	ToolResult Dist
}

// ScaleStep is one level of the scale search (text-only sessions, decoupled).
type ScaleStep struct {
	Sessions int
	TTFT     Dist
	Overhead Dist
	Errors   int
	Rate     float64 // sessions (turns) completed per second
	Phases   [NumPhases]Dist
	Try      int // 1, or 2 for the second try of a level that missed
	Store    StoreTimes
	Mem      ScaleMemory
}

// ScaleMemory is the memory of the process (server, brains, fake model and clients) during a scale level,
// sampled every 100 ms: the live heap before the level (after a GC) and at its peak, and the most goroutines.
type ScaleMemory struct {
	HeapBase, HeapPeak uint64
	Goroutines         int
}

// PerSession is the heap the level added at its peak, per concurrent session.
func (m ScaleMemory) PerSession(sessions int) uint64 {
	if sessions <= 0 || m.HeapPeak < m.HeapBase {
		return 0
	}
	return (m.HeapPeak - m.HeapBase) / uint64(sessions)
}

// Holds reports whether the level held: no session failed and the p95 overhead stayed under the goal.
func (s ScaleStep) Holds() bool { return s.Errors == 0 && s.Overhead.P95 < GoalScaleOverhead }

// FailoverResult is the brain failover measurement.
type FailoverResult struct {
	LeaseTTL time.Duration
	// Resume is from SIGKILL of the brain holding the session to the first event the other brain appended to it;
	// Complete is to the end of the resumed turn. One entry per run.
	Resume, Complete []time.Duration
}

// Report is everything one `corral bench` run measured.
type Report struct {
	Started                               time.Time
	Elapsed                               time.Duration
	Command                               string
	Machine                               string
	Load                                  string // load average before and after
	Store                                 string
	Workers                               int
	ModelTTFT, ModelPerToken, ModelJitter time.Duration
	ToolShare                             float64
	SandboxStarts                         int         // the TTFT servers' bound on sandboxes started at once (0: none)
	SandboxWarm                           int         // bwrap's starts kept ready (--sandbox-warm; 0: none)
	PerSlot                               map[int]int // concurrency -> sessions per slot
	ScaleModelTTFT                        time.Duration
	ScalePerSlot                          int

	Cells   []Cell
	Hands   []HandsResult
	Log     *LogResult
	History []HistoryLevel
	// HistoryTurns is the turns measured at each History level.
	HistoryTurns int
	Scale        []ScaleStep
	ScaleMax     int // the largest level whose p95 overhead stayed under the limit
	Memory       *MemoryResult
	CPU          []CPUResult
	Failover     *FailoverResult
	Recipe       *RecipeResult
	Multiagent   *MultiagentResult
	MemStores    []*MemStoreResult
	Webhooks     *WebhookResult
	Skipped      []string // "section: reason"
}

// Goals.
const (
	GoalRatioP50      = 0.4
	GoalRatioP95      = 0.1
	GoalOverheadP50   = 5 * time.Millisecond
	GoalOverheadP95   = 20 * time.Millisecond
	GoalScaleOverhead = 50 * time.Millisecond
	GoalScaleSessions = 1000
	GoalFailover      = 5 * time.Second
)

// Cell returns the cell for backend, mode and concurrency, if measured.
func (r *Report) Cell(backend, mode string, concurrency int) (Cell, bool) {
	for _, c := range r.Cells {
		if c.Backend == backend && c.Mode == mode && c.Concurrency == concurrency {
			return c, true
		}
	}
	return Cell{}, false
}

// Pair is a decoupled cell and its coupled counterpart.
type Pair struct {
	Backend     string
	Concurrency int
	D, C        Cell
}

// Pairs returns the backend/concurrency combinations measured in both modes, in measurement order.
func (r *Report) Pairs() []Pair {
	var out []Pair
	for _, d := range r.Cells {
		if d.Mode != Decoupled {
			continue
		}
		if c, ok := r.Cell(d.Backend, Coupled, d.Concurrency); ok {
			out = append(out, Pair{Backend: d.Backend, Concurrency: d.Concurrency, D: d, C: c})
		}
	}
	return out
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

// Goal is one target and how the run measured against it.
type Goal struct {
	Name, Target, Measured string
	Met                    bool
	Measured0              bool // false when the goal could not be measured
}

// Goals evaluates the run against the goals.
func (r *Report) Goals() []Goal {
	var gs []Goal
	pairs := r.Pairs()
	for _, p := range pairs {
		if p.Concurrency != maxConcurrency(pairs, p.Backend) {
			continue
		}
		r50, r95 := ratio(p.D.TTFT.P50, p.C.TTFT.P50), ratio(p.D.TTFT.P95, p.C.TTFT.P95)
		gs = append(gs, Goal{
			Name:   fmt.Sprintf("TTFT decoupled/coupled, %s, %d sessions", p.Backend, p.Concurrency),
			Target: fmt.Sprintf("p50 <= %.1f, p95 <= %.1f", GoalRatioP50, GoalRatioP95), Measured0: true,
			Measured: fmt.Sprintf("p50 %.2f, p95 %.2f", r50, r95), Met: r50 <= GoalRatioP50 && r95 <= GoalRatioP95,
		})
	}
	for _, c := range r.Cells {
		if c.Mode == Decoupled && c.Concurrency == 100 {
			gs = append(gs, Goal{
				Name:   fmt.Sprintf("platform overhead, %s, 100 sessions", c.Backend),
				Target: fmt.Sprintf("p50 <= %s ms, p95 <= %s ms", Ms(GoalOverheadP50), Ms(GoalOverheadP95)), Measured0: true,
				Measured: fmt.Sprintf("p50 %s ms, p95 %s ms", Ms(c.Overhead.P50), Ms(c.Overhead.P95)),
				Met:      c.Overhead.P50 <= GoalOverheadP50 && c.Overhead.P95 <= GoalOverheadP95,
			})
		}
	}
	if len(r.Scale) > 0 {
		gs = append(gs, Goal{
			Name: "concurrent active sessions with p95 overhead < 50 ms", Target: fmt.Sprintf(">= %d", GoalScaleSessions),
			Measured: scaleText(r), Met: r.ScaleMax >= GoalScaleSessions, Measured0: true,
		})
	}
	if f := r.Failover; f != nil && len(f.Resume) > 0 {
		worst := slices.Max(f.Resume)
		gs = append(gs, Goal{
			Name: "failover (SIGKILL to resumed in another brain)", Target: "<= 5 s", Measured0: true,
			Measured: fmt.Sprintf("%.2f s (worst of %d)", worst.Seconds(), len(f.Resume)), Met: worst <= GoalFailover,
		})
	}
	return gs
}

func scaleText(r *Report) string {
	if r.ScaleMax == 0 {
		return fmt.Sprintf("none of the levels tried (smallest %d)", r.Scale[0].Sessions)
	}
	s := fmt.Sprintf("%d", r.ScaleMax)
	if last := r.Scale[len(r.Scale)-1]; last.Sessions == r.ScaleMax {
		s += " (the largest level tried)"
	}
	return s
}

func maxConcurrency(pairs []Pair, backend string) int {
	m := 0
	for _, p := range pairs {
		if p.Backend == backend {
			m = max(m, p.Concurrency)
		}
	}
	return m
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "**no**"
}

func dist3(d Dist) string { return Ms(d.P50) + " / " + Ms(d.P95) + " / " + Ms(d.P99) }

// dist2 is "p50 / p95", or a dash when nothing was measured (an operation the run never made).
func dist2(d Dist) string {
	if d.N == 0 {
		return "—"
	}
	return Ms(d.P50) + " / " + Ms(d.P95)
}

// WriteSummary writes the summary table (stdout of corral bench).
func (r *Report) WriteSummary(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "backend\tsessions\tdecoupled TTFT p50/p95/p99 ms\tcoupled TTFT p50/p95/p99 ms\tratio p50\tratio p95\toverhead p50/p95 ms (decoupled)\tcoupled overhead p50/p95 ms")
	for _, p := range r.Pairs() {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Backend, p.Concurrency, dist3(p.D.TTFT), dist3(p.C.TTFT),
			Ratio(p.D.TTFT.P50, p.C.TTFT.P50), Ratio(p.D.TTFT.P95, p.C.TTFT.P95), dist2(p.D.Overhead), dist2(p.C.Overhead))
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "goal\ttarget\tmeasured\tmet")
	for _, g := range r.Goals() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", g.Name, g.Target, g.Measured, strings.Trim(yes(g.Met), "*"))
	}
	tw.Flush()
	if rc := r.Recipe; rc != nil && len(rc.Cells) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "recipe sessions\tdecoupled TTFT p50/p95 ms\tcoupled TTFT p50/p95 ms\tratio p50\tratio p95\tfirst tool result decoupled p50/p95 ms\tcoupled p50/p95 ms")
		for _, n := range rc.Levels() {
			d, _ := rc.Cell(Decoupled, n)
			c, _ := rc.Cell(Coupled, n)
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", n, dist2(d.TTFT), dist2(c.TTFT), Ratio(d.TTFT.P50, c.TTFT.P50), Ratio(d.TTFT.P95, c.TTFT.P95),
				dist2(d.ToolResult), dist2(c.ToolResult))
		}
		tw.Flush()
		if rc.Build > 0 {
			fmt.Fprintf(w, "recipe image build %.1f s; provision p50 %s ms on it, %s ms without packages\n", rc.Build.Seconds(), Ms(rc.ProvisionPackages.P50), Ms(rc.ProvisionBase.P50))
		}
	}
	if m := r.Multiagent; m != nil {
		fmt.Fprintln(w)
		m.writeSummary(w)
	}
	for _, m := range r.MemStores {
		fmt.Fprintln(w)
		m.writeSummary(w)
	}
	if len(r.History) > 0 {
		writeHistorySummary(w, r.History)
	}
	if wh := r.Webhooks; wh != nil {
		fmt.Fprintf(w, "\nwebhooks: log append → delivery p50 %s ms, p95 %s ms; %s\n", Ms(wh.Latency.P50), Ms(wh.Latency.P95), wh.rates())
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(w, "skipped: %s\n", s)
	}
}
