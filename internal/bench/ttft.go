package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/client"
)

// FakeModel is the scripted model server behind the brains, as the benchmark needs it.
type FakeModel interface {
	// ScriptTool makes the first answer to the request whose last user text is marker a bash tool call running
	// command; the answer after the tool result is the default short text.
	ScriptTool(marker, command string)
	// ModelTime waits (until ctx is done) for the fake model to have answered the first request whose last user
	// text is marker, and returns when it received the request and when it finished answering it.
	ModelTime(ctx context.Context, marker string) (received, done time.Time, err error)
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
	// ToolResult is from the send to when the client read the first agent.tool_result (a tool session's).
	ToolResult time.Duration
	// Phases splits the overhead, from the events' append times and the fake model's clock (one host, one
	// clock): see Phase names.
	Phases [NumPhases]time.Duration
}

// Phases of the platform overhead.
const (
	// send -> session.status_running appended: the API's append, wake-up, claim, reading the log and building
	// the request (the running status rides on the model request's start, in one append)
	PhaseWake = iota
	// -> span.model_request_start appended: zero unless coupled, where the session is announced running
	// before its sandbox is provisioned
	PhasePrepare
	// -> the fake model received the request: the adapter and the HTTP hop. The brain sends the request while it
	// appends its start, so this is negative when the request arrives before the append's transaction runs.
	PhaseToModel
	PhaseAnswer  // the fake model done -> the answer appended: reading the stream's end, the append
	PhaseDeliver // -> the client read the answer on its SSE stream
	NumPhases
)

// PhaseNames name the phases in reports.
var PhaseNames = [NumPhases]string{"wake (send to running)", "coupled sandbox (running to request start)", "to model (HTTP)", "answer appended", "SSE delivery"}

// Overhead is what the platform adds to the model's own time: TTFT minus Model.
func (s Sample) Overhead() time.Duration { return s.TTFT - s.Model }

// Workload is the TTFT workload: Concurrency slots, each running PerSlot fresh sessions one after the other
// (create the session, open its stream, send the first message, read until the turn is over). The slots start
// spread evenly over Stagger, so that about Concurrency sessions are in flight at any time without arriving in
// one synchronized burst.
type Workload struct {
	AgentID, EnvID string
	Concurrency    int
	PerSlot        int
	// Stagger spreads the slots' starts (typically the model's TTFT); 0 starts them together.
	Stagger time.Duration
	// ToolShare is the fraction of sessions whose first answer is a tool call (bash ToolCommand); the others get
	// a short text answer.
	ToolShare   float64
	ToolCommand string
	// ToolWant, if set, are strings the first tool result must contain (else the session counts as failed):
	// the recipe workload checks that its packages and repository are there.
	ToolWant []string
	// Resources are given to every session (the recipe workload's repository).
	Resources []client.ResourceParams
	// Timeout bounds one session's turn (default 2 min).
	Timeout time.Duration
}

// RunTTFT runs the workload and returns the samples of the sessions that completed, the number that failed,
// and the first failure.
func RunTTFT(ctx context.Context, c *Client, fake FakeModel, w Workload) ([]Sample, int, error) {
	if w.Timeout == 0 {
		w.Timeout = 2 * time.Minute
	}
	if w.ToolCommand == "" {
		w.ToolCommand = "echo hello"
	}
	var (
		mu       sync.Mutex
		samples  []Sample
		errs     int
		firstErr error
		wg       sync.WaitGroup
	)
	for slot := range w.Concurrency {
		wg.Go(func() {
			if w.Stagger > 0 && w.Concurrency > 1 {
				select {
				case <-time.After(w.Stagger * time.Duration(slot) / time.Duration(w.Concurrency)):
				case <-ctx.Done():
					return
				}
			}
			for k := range w.PerSlot {
				if ctx.Err() != nil {
					return
				}
				// Spread tool sessions evenly, over the slots of every round (numbered round by round, so that no
				// round is all tool sessions): session i needs a tool when the running share crosses an integer.
				i := k*w.Concurrency + slot
				tool := int(float64(i+1)*w.ToolShare) > int(float64(i)*w.ToolShare)
				s, err := session(ctx, c, fake, w, tool, fmt.Sprintf("s%d-%d", slot, k))
				mu.Lock()
				if err != nil {
					errs++
					if firstErr == nil {
						firstErr = err
					}
				} else {
					samples = append(samples, s)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(samples) == 0 && firstErr == nil {
		firstErr = ctx.Err()
	}
	return samples, errs, firstErr
}

type prepared struct {
	id     string
	stream *Stream
	tool   bool
	marker string
	want   []string
}

// session runs one fresh session's first turn.
func session(ctx context.Context, c *Client, fake FakeModel, w Workload, tool bool, name string) (Sample, error) {
	id, err := c.CreateSession(ctx, w.AgentID, w.EnvID, w.Resources...)
	if err != nil {
		return Sample{}, err
	}
	st, err := c.Open(ctx, id)
	if err != nil {
		return Sample{}, err
	}
	defer st.Close()
	p := &prepared{id: id, stream: st, tool: tool, marker: "bench " + name + " " + id, want: w.ToolWant}
	if tool {
		fake.ScriptTool(p.marker, w.ToolCommand)
	}
	return turn(ctx, c, fake, p, w.Timeout)
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
	var running, spanStart, output time.Time
	var outputRead time.Time
	for {
		ev, err := p.stream.Next()
		if err != nil {
			if ctx.Err() != nil {
				err = fmt.Errorf("session %s: turn not over after %v: %w", p.id, timeout, ctx.Err())
			}
			return s, err
		}
		at := time.Time{}
		if ev.ProcessedAt != nil {
			at = *ev.ProcessedAt
		}
		switch {
		case ev.Type == apitype.EventSessionStatusRunning && running.IsZero():
			running = at
		case ev.Type == apitype.EventSpanModelRequestStart && spanStart.IsZero():
			spanStart = at
		}
		if ev.Type == apitype.EventAgentToolResult && s.ToolResult == 0 {
			s.ToolResult = ev.At.Sub(t0)
			if err := checkToolResult(ev, p.want); err != nil {
				return s, fmt.Errorf("session %s: %w", p.id, err)
			}
		}
		if s.TTFT == 0 && ev.ModelOutput() {
			s.TTFT, output, outputRead = ev.At.Sub(t0), at, ev.At
		}
		if ev.TurnOver() {
			s.Turn = ev.At.Sub(t0)
			break
		}
	}
	if s.TTFT == 0 {
		return s, errors.New("session " + p.id + ": turn ended without model output")
	}
	received, done, err := fake.ModelTime(ctx, p.marker)
	if err != nil {
		return s, err
	}
	s.Model = done.Sub(received)
	if !running.IsZero() && !spanStart.IsZero() && !output.IsZero() {
		s.Phases = [NumPhases]time.Duration{
			PhaseWake: running.Sub(t0), PhasePrepare: spanStart.Sub(running), PhaseToModel: received.Sub(spanStart),
			PhaseAnswer: output.Sub(done), PhaseDeliver: outputRead.Sub(output),
		}
	}
	return s, nil
}

// checkToolResult fails a tool result that is an error or lacks one of want.
func checkToolResult(ev *Event, want []string) error {
	var body struct {
		IsError bool `json:"is_error"`
	}
	if err := ev.Decode(&body); err != nil {
		return err
	}
	text := string(ev.Content)
	if body.IsError {
		return fmt.Errorf("the first tool call failed: %.500s", text)
	}
	for _, w := range want {
		if !strings.Contains(text, w) {
			return fmt.Errorf("the first tool result lacks %q: %.500s", w, text)
		}
	}
	return nil
}

// PhaseDists summarises each phase over the samples that have them.
func PhaseDists(ss []Sample) [NumPhases]Dist {
	var out [NumPhases]Dist
	for ph := range NumPhases {
		var ds []time.Duration
		for _, s := range ss {
			if s.Phases != ([NumPhases]time.Duration{}) {
				ds = append(ds, s.Phases[ph])
			}
		}
		out[ph] = Summarize(ds)
	}
	return out
}

// TTFTs, Overheads and Models extract one column of samples; ToolResults the tool sessions' ToolResult.
func TTFTs(ss []Sample) []time.Duration {
	return column(ss, func(s Sample) time.Duration { return s.TTFT })
}
func ToolResults(ss []Sample) []time.Duration {
	var out []time.Duration
	for _, s := range ss {
		if s.ToolResult > 0 {
			out = append(out, s.ToolResult)
		}
	}
	return out
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
