package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"time"

	"github.com/corralhq/corral/internal/store"
)

// The scale section: the most concurrent active sessions whose p95 platform overhead stays under the limit,
// with the process's live heap and goroutines sampled through each level.

func (b *benchRun) scale(ctx context.Context) error {
	levels := b.cfg.Scale
	// Sessions stay active for a model call as long as a real one: a slower fake model of its own.
	fake, err := b.startFake(b.cfg.ScaleTTFT)
	if err != nil {
		return err
	}
	defer fake.close()
	var timed *TimedStore
	s, err := b.startServer(ctx, "scale", serverSpec{fake: fake, wrap: func(st store.Store) store.Store {
		timed = NewTimedStore(st)
		return timed
	}})
	if err != nil {
		return err
	}
	defer s.close()
levels:
	for _, n := range levels {
		if n > b.cfg.Workers {
			b.skip(fmt.Sprintf("scale at %d sessions", n), fmt.Sprintf("more than --brains %d", b.cfg.Workers))
			break
		}
		for try := 1; try <= 2; try++ {
			b.progress("scale: %d concurrent active sessions × %d turns each (try %d)", n, b.cfg.ScalePerSlot, try)
			timed.Take()
			mem := sampleMemory()
			t0 := time.Now()
			stopProfile := func() bool { return false }
			if try == 1 && b.cfg.ScaleHeapProfile != "" {
				stopProfile = b.heapProfileAt(fmt.Sprintf("%s-%d.pb.gz", b.cfg.ScaleHeapProfile, n), b.cfg.ScaleTTFT*3/2)
			}
			samples, errs, err := RunTTFT(ctx, s.c, fake, Workload{
				AgentID: s.agentID, EnvID: s.envID, Concurrency: n, PerSlot: b.cfg.ScalePerSlot, Stagger: b.cfg.ScaleTTFT,
			})
			stopProfile()
			stt := timed.Take()
			rate := float64(len(samples)) / time.Since(t0).Seconds()
			if err != nil && len(samples) == 0 {
				return err
			}
			step := ScaleStep{Sessions: n, Try: try, TTFT: Summarize(TTFTs(samples)), Overhead: Summarize(Overheads(samples)),
				Errors: errs, Rate: rate, Phases: PhaseDists(samples), Store: stt, Mem: mem()}
			b.rep.Scale = append(b.rep.Scale, step)
			b.progress("scale: %d sessions: overhead p50 %s p95 %s ms, %.0f turns/s, %d errors; store append p95 %s ms, claim p95 %s ms, %d claims (%d sessions); heap peak %.0f MiB (+%d KiB per session), %d goroutines",
				n, Ms(step.Overhead.P50), Ms(step.Overhead.P95), rate, errs, Ms(stt.Append.P95), Ms(stt.Claim.P95), stt.Claims, stt.ClaimsFound,
				float64(step.Mem.HeapPeak)/(1<<20), step.Mem.PerSession(n)>>10, step.Mem.Goroutines)
			if err != nil {
				b.progress("scale: first error: %v", err)
			}
			s.c.CloseIdleConnections()
			fake.forget()
			if step.Holds() {
				b.rep.ScaleMax = n
				continue levels
			}
		}
		break
	}
	return nil
}

// heapProfileAt writes a heap profile to path after d (after a GC, so that it shows what is live then), unless
// the function it returns is called first.
func (b *benchRun) heapProfileAt(path string, d time.Duration) (stop func() bool) {
	return time.AfterFunc(d, func() {
		runtime.GC()
		b.writeHeapProfile("scale", path)
	}).Stop
}

// writeHeapProfile writes the heap profile as of the last GC to path, and says so, or why not, as section.
func (b *benchRun) writeHeapProfile(section, path string) {
	f, err := os.Create(path)
	if err == nil {
		err = pprof.Lookup("heap").WriteTo(f, 0)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		b.progress("%s: heap profile: %v", section, err)
		return
	}
	b.progress("%s: heap profile written to %s", section, path)
}

// sampleMemory starts sampling the process's live heap and goroutines every 100 ms (after a GC for the base);
// the function it returns stops the sampling and gives what it saw.
func sampleMemory() func() ScaleMemory {
	runtime.GC()
	samples := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/sched/goroutines:goroutines"}}
	read := func() (uint64, int) {
		metrics.Read(samples)
		return samples[0].Value.Uint64(), int(samples[1].Value.Uint64())
	}
	var m ScaleMemory
	m.HeapBase, m.Goroutines = read()
	m.HeapPeak = m.HeapBase
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			h, g := read()
			m.HeapPeak, m.Goroutines = max(m.HeapPeak, h), max(m.Goroutines, g)
		}
	}()
	return func() ScaleMemory {
		close(stop)
		<-done
		return m
	}
}
