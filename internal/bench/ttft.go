package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// FakeModel is the scripted model server behind the brains, as the benchmark needs it.
type FakeModel interface {
	// ScriptTool makes the first answer to the request whose last user text is marker a bash tool call running
	// command; the answer after the tool result is the default short text.
	ScriptTool(marker, command string)
	// ModelTime waits (until ctx is done) for the fake model to have answered the first request whose last user
	// text is marker, and returns how long it took from receiving the request to the end of its answer.
	ModelTime(ctx context.Context, marker string) (time.Duration, error)
}

// Sample is one session's first turn as a client saw it.
type Sample struct {
	Tool bool
	// TTFT is from just before the client sends its user.message to when it reads the first event that carries
	// model output on the session's stream.
	TTFT time.Duration
	// Model is the fake model's own time for the turn's first call (request received to answer complete).
	Model time.Duration
	// Turn is from the send to the end of the turn (session idle).
	Turn time.Duration
}

// Overhead is what the platform adds to the model's own time: TTFT minus Model.
func (s Sample) Overhead() time.Duration { return s.TTFT - s.Model }

// Workload is the TTFT workload: rounds of Concurrency fresh sessions that send their first message together.
type Workload struct {
	AgentID, EnvID string
	Concurrency    int
	Rounds         int
	// ToolShare is the fraction of sessions whose first answer is a tool call (bash ToolCommand); the others get
	// a short text answer.
	ToolShare   float64
	ToolCommand string
	// Timeout bounds one session's turn (default 2 min).
	Timeout time.Duration
	// Progress, if set, is called after each round.
	Progress func(round int, samples []Sample, errs int)
}

// RunTTFT runs the workload and returns the samples of the sessions that completed, and the number that failed.
// In each round every session is created and its stream opened first; then all send at once.
func RunTTFT(ctx context.Context, c *Client, fake FakeModel, w Workload) ([]Sample, int, error) {
	if w.Timeout == 0 {
		w.Timeout = 2 * time.Minute
	}
	if w.ToolCommand == "" {
		w.ToolCommand = "echo hello"
	}
	var all []Sample
	errs := 0
	var firstErr error
	for round := range w.Rounds {
		samples, n, err := runRound(ctx, c, fake, w, round)
		all = append(all, samples...)
		errs += n
		if firstErr == nil {
			firstErr = err
		}
		if ctx.Err() != nil {
			return all, errs, ctx.Err()
		}
		if w.Progress != nil {
			w.Progress(round, all, errs)
		}
	}
	if len(all) == 0 && firstErr != nil {
		return nil, errs, firstErr
	}
	return all, errs, nil
}

type prepared struct {
	id     string
	stream *Stream
	tool   bool
	marker string
}

func runRound(ctx context.Context, c *Client, fake FakeModel, w Workload, round int) ([]Sample, int, error) {
	n := w.Concurrency
	preps := make([]*prepared, n)
	var mu sync.Mutex
	var firstErr error
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	// Set up: sessions and open streams, 32 at a time.
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			id, err := c.CreateSession(ctx, w.AgentID, w.EnvID)
			if err != nil {
				fail(err)
				return
			}
			st, err := c.Open(ctx, id)
			if err != nil {
				fail(err)
				return
			}
			p := &prepared{id: id, stream: st, marker: fmt.Sprintf("bench r%d s%d %s", round, i, id)}
			// Spread tool sessions evenly: session i needs a tool when the running share crosses an integer.
			p.tool = int(float64(i+1)*w.ToolShare) > int(float64(i)*w.ToolShare)
			if p.tool {
				fake.ScriptTool(p.marker, w.ToolCommand)
			}
			preps[i] = p
		})
	}
	wg.Wait()

	start := make(chan struct{})
	samples := make([]Sample, 0, n)
	errs := 0
	for _, p := range preps {
		if p == nil {
			errs++
			continue
		}
		wg.Go(func() {
			defer p.stream.Close()
			<-start
			s, err := turn(ctx, c, fake, p, w.Timeout)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs++
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			samples = append(samples, s)
		})
	}
	close(start)
	wg.Wait()
	return samples, errs, firstErr
}

// turn sends the session's first message and reads its stream until the turn is over.
func turn(ctx context.Context, c *Client, fake FakeModel, p *prepared, timeout time.Duration) (Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stop := context.AfterFunc(ctx, p.stream.Close)
	defer stop()
	s := Sample{Tool: p.tool}
	t0 := time.Now()
	if err := c.Say(ctx, p.id, p.marker); err != nil {
		return s, err
	}
	for {
		ev, err := p.stream.Next()
		if err != nil {
			if ctx.Err() != nil {
				err = fmt.Errorf("session %s: turn not over after %v: %w", p.id, timeout, ctx.Err())
			}
			return s, err
		}
		if s.TTFT == 0 && ev.ModelOutput() {
			s.TTFT = ev.At.Sub(t0)
		}
		if ev.TurnOver() {
			s.Turn = ev.At.Sub(t0)
			break
		}
	}
	if s.TTFT == 0 {
		return s, errors.New("session " + p.id + ": turn ended without model output")
	}
	m, err := fake.ModelTime(ctx, p.marker)
	if err != nil {
		return s, err
	}
	s.Model = m
	return s, nil
}

// TTFTs, Overheads and Models extract one column of samples.
func TTFTs(ss []Sample) []time.Duration {
	return column(ss, func(s Sample) time.Duration { return s.TTFT })
}
func Overheads(ss []Sample) []time.Duration { return column(ss, Sample.Overhead) }
func Models(ss []Sample) []time.Duration {
	return column(ss, func(s Sample) time.Duration { return s.Model })
}

func column(ss []Sample, f func(Sample) time.Duration) []time.Duration {
	out := make([]time.Duration, len(ss))
	for i, s := range ss {
		out[i] = f(s)
	}
	return out
}
