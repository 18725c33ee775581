package bench

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// CPUResult is the CPU fairness measurement on one backend: the overhead of talk-only sessions (no tool) alone,
// and again while other sessions run CPU-bound tools (busy loops in their sandboxes).
type CPUResult struct {
	Backend string
	// Share and Idle are the sandboxes' CPU settings (--sandbox-cpu-share: 0 is the default, negative the
	// kernel's; --sandbox-cpu-idle).
	Share    int
	Idle     bool
	Busy     int // sessions running a busy loop in their sandboxes meanwhile
	Sessions int // concurrent talk-only sessions
	// Alone and Loaded are the talk-only sessions' overhead (TTFT minus the model's time) without and with the
	// busy sandboxes.
	Alone, Loaded Dist
	Errors        int
}

// cpu measures what CPU-bound sandboxes cost the latency of sessions that only talk.
func (b *benchRun) cpu(ctx context.Context, be *benchBackend) error {
	busy, talk, perSlot := 4, 10, 10
	if b.cfg.Quick {
		perSlot = 3
	}
	s, err := b.startServer(ctx, "cpu-"+be.name, serverSpec{fake: b.fake, backend: be, idle: time.Minute})
	if err != nil {
		return err
	}
	defer s.close()
	res := CPUResult{Backend: be.name, Share: b.cfg.CPUShare, Idle: b.cfg.CPUIdle, Busy: busy, Sessions: talk}
	w := Workload{AgentID: s.agentID, EnvID: s.envID, Concurrency: talk, PerSlot: perSlot, Stagger: b.cfg.ModelTTFT}
	// A first round warms the server (connections, the store's caches) and is not counted.
	if _, _, err := RunTTFT(ctx, s.c, b.fake, Workload{AgentID: s.agentID, EnvID: s.envID, Concurrency: talk, PerSlot: 2}); err != nil {
		return err
	}
	b.progress("cpu: %s, %d talk-only sessions alone", be.name, talk)
	alone, errs, err := RunTTFT(ctx, s.c, b.fake, w)
	if err != nil && len(alone) == 0 {
		return err
	}
	res.Alone, res.Errors = Summarize(Overheads(alone)), errs

	// The busy sessions' tool calls spin until the section is over: the server's Stop kills their sandboxes.
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stopLoad()
		s.close()
		wg.Wait()
	}()
	bw := Workload{AgentID: s.agentID, EnvID: s.envID, Concurrency: busy, PerSlot: 1, ToolShare: 1,
		ToolCommand: "while :; do :; done", Timeout: 10 * time.Minute}
	wg.Go(func() { _, _, _ = RunTTFT(loadCtx, s.c, b.fake, bw) })
	pool := s.Pool()
	if pool == nil {
		return fmt.Errorf("no sandbox pool")
	}
	for deadline := time.Now().Add(2 * time.Minute); pool.Sessions() < busy; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the %d busy sandboxes did not start (%d did)", busy, pool.Sessions())
		}
	}
	time.Sleep(2 * time.Second) // the loops run
	b.progress("cpu: %s, %d talk-only sessions beside %d busy sandboxes", be.name, talk, busy)
	loaded, errs, err := RunTTFT(ctx, s.c, b.fake, w)
	if err != nil && len(loaded) == 0 {
		return err
	}
	res.Loaded, res.Errors = Summarize(Overheads(loaded)), res.Errors+errs
	b.progress("cpu: %s overhead p50/p95 %s ms alone, %s ms beside busy sandboxes", be.name, dist2(res.Alone), dist2(res.Loaded))
	b.rep.CPU = append(b.rep.CPU, res)
	return nil
}
