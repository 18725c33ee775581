package bench

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// MemoryResult is what idle sessions cost a server: an idle session must hold no goroutine and no sandbox.
type MemoryResult struct {
	Sessions, ToolSessions int
	// HeapPerSession and RSSPerSession are the growth of the live heap (after GC) and of the process's resident
	// set (after returning freed memory to the OS), divided by Sessions. The store is in the same process.
	HeapPerSession, RSSPerSession     float64
	GoroutinesBefore, GoroutinesAfter int
	// SandboxesLeft is how many sandboxes the pool still held after the idle timeout.
	SandboxesLeft int
}

// Snapshot is the process's memory and goroutines, after a GC.
type Snapshot struct {
	Heap, RSS  uint64
	Goroutines int
}

// Measure forces a GC, returns freed memory to the OS and reads the live heap, RSS and goroutine count.
func Measure() Snapshot {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return Snapshot{Heap: ms.HeapAlloc, RSS: rss(), Goroutines: runtime.NumGoroutine()}
}

// rss reads the resident set size from /proc/self/statm (0 where it does not exist).
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseUint(f[1], 10, 64)
	return pages * uint64(os.Getpagesize())
}

// IdleConfig configures RunIdleMemory.
type IdleConfig struct {
	Workload // PerSlot is derived from Sessions
	Sessions int
	// Sandboxes, if set, reports how many sandboxes the server's hands hold.
	Sandboxes func() int
	// Settle bounds the wait for the sandboxes to be reaped and connections to close.
	Settle time.Duration
	// Forget, if set, is called before each snapshot to drop what the benchmark itself keeps in the process
	// (the fake model's record of requests).
	Forget func()
	// CloseIdle, if set, closes the idle connections of the server's clients (its model adapter's) before each
	// snapshot, as the benchmark's own client's are: how many of them a pool keeps varies from run to run, by
	// far more than the sessions' own bytes.
	CloseIdle func()
	// Measured, if set, is called after each snapshot with "before" or "after".
	Measured func(when string)
}

// RunIdleMemory warms the server with one round, takes a snapshot, runs Sessions sessions through one turn each,
// lets them go idle (streams closed, sandboxes reaped), and takes another.
func RunIdleMemory(ctx context.Context, c *Client, fake FakeModel, cfg IdleConfig) (MemoryResult, error) {
	res := MemoryResult{}
	w := cfg.Workload
	w.PerSlot = 1
	if _, _, err := RunTTFT(ctx, c, fake, w); err != nil {
		return res, err
	}
	settle := func() {
		c.CloseIdleConnections()
		if cfg.CloseIdle != nil {
			cfg.CloseIdle()
		}
		deadline := time.Now().Add(cfg.Settle)
		for time.Now().Before(deadline) && cfg.Sandboxes != nil && cfg.Sandboxes() > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		// Server-side connection goroutines exit: wait until the count stops falling.
		last, stable := runtime.NumGoroutine(), 0
		for time.Now().Before(deadline.Add(5*time.Second)) && stable < 5 {
			time.Sleep(200 * time.Millisecond)
			n := runtime.NumGoroutine()
			if n < last {
				stable = 0
			} else {
				stable++
			}
			last = min(last, n)
		}
		if cfg.Forget != nil {
			cfg.Forget()
		}
	}
	measure := func(when string) Snapshot {
		s := Measure()
		if cfg.Measured != nil {
			cfg.Measured(when)
		}
		return s
	}
	settle()
	before := measure("before")
	w.PerSlot = max(1, cfg.Sessions/max(w.Concurrency, 1))
	if err := countSessions(ctx, &res, c, fake, w); err != nil {
		return res, err
	}
	settle()
	after := measure("after")
	if res.Sessions > 0 {
		res.HeapPerSession = (float64(after.Heap) - float64(before.Heap)) / float64(res.Sessions)
		res.RSSPerSession = (float64(after.RSS) - float64(before.RSS)) / float64(res.Sessions)
	}
	res.GoroutinesBefore, res.GoroutinesAfter = before.Goroutines, after.Goroutines
	if cfg.Sandboxes != nil {
		res.SandboxesLeft = cfg.Sandboxes()
	}
	return res, nil
}

func (b *benchRun) idle(ctx context.Context, be *benchBackend) error {
	s, err := b.startServer(ctx, "idle", serverSpec{fake: b.fake, backend: be, idle: time.Second})
	if err != nil {
		return err
	}
	defer s.close()
	share := 0.1
	var sandboxes func() int
	if pool := s.Pool(); pool != nil {
		sandboxes = pool.Sessions
	} else {
		share = 0
	}
	b.progress("idle: %d sessions through one turn each, then idle", b.cfg.IdleSessions)
	res, err := RunIdleMemory(ctx, s.c, b.fake, IdleConfig{
		Workload: Workload{AgentID: s.agentID, EnvID: s.envID, Concurrency: 50, ToolShare: share},
		Sessions: b.cfg.IdleSessions, Sandboxes: sandboxes, Settle: 10 * time.Second, Forget: b.fake.forget,
		CloseIdle: b.fake.closeIdle, Measured: b.idleHeapProfile,
	})
	if err != nil {
		return err
	}
	b.progress("idle: heap %.0f B/session, goroutines %d -> %d, sandboxes left %d", res.HeapPerSession, res.GoroutinesBefore, res.GoroutinesAfter, res.SandboxesLeft)
	b.rep.Memory = &res
	return nil
}

// countSessions runs the workload w and counts its sessions into res: its samples, which the benchmark keeps, are
// garbage by the time the idle sessions are measured.
func countSessions(ctx context.Context, res *MemoryResult, c *Client, fake FakeModel, w Workload) error {
	samples, _, err := RunTTFT(ctx, c, fake, w)
	res.Sessions = len(samples)
	for _, s := range samples {
		if s.Tool {
			res.ToolSessions++
		}
	}
	return err
}

// idleHeapProfile writes the idle section's heap profile of a snapshot (when: "before" or "after"), if asked for.
func (b *benchRun) idleHeapProfile(when string) {
	if b.cfg.IdleHeapProfile != "" {
		b.writeHeapProfile("idle", b.cfg.IdleHeapProfile+"-"+when+".pb.gz")
	}
}
