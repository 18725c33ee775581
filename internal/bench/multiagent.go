package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/client"
)

// The multiagent section (issue 22) measures what the brain adds around a multi-agent session's threads, with the
// fake model's clock at both ends (one host, one clock):
//
//   - a child's start: from the fake model's end of a coordinator's answer that is one start_thread call to the
//     fake receiving the child's first request (when its first token could start), against a single-agent
//     session's next request after a bash call, in sessions that alternate with the coordinator's;
//   - a fan-out: one coordinator starting many children in one answer, each child a bash call and a short
//     answer: the children's start and their next request after the bash call, and the wall time until every
//     child has reported back.
//
// The workload's markers ("<ma ...>", taskMark) key the fake model's calls by session and thread: a session's
// first user message, or the task a child thread starts on (its first user message).

// MultiagentResult is the multiagent section.
type MultiagentResult struct {
	Backend string
	// Runs is the sessions of each kind of the start comparison (coordinator, single-agent).
	Runs int
	// ChildStart is from the fake model's end of the coordinator's start_thread answer to its receipt of the
	// child's first request; ChildStartAppended from the start's append (the thread created, its task sent) to
	// the same.
	ChildStart, ChildStartAppended Dist
	// SingleCold and SingleWarm are a single-agent session's next request after its first bash call (the sandbox
	// provisioned) and after its second (warm): from the fake's end of the answer calling bash to its receipt of
	// the next request; the ...Result fields from the tool result's append to the same.
	SingleCold, SingleColdResult, SingleWarm, SingleWarmResult Dist
	// SingleWarmPhases and FanStepPhases split SingleWarm and FanStep (see stepPhaseNames).
	SingleWarmPhases, FanStepPhases [numStepPhases]Dist
	Errors                          int
	FirstError                      string

	// Children is the start_thread calls of the fan-out's coordinator answer, Rounds its sessions; Started and
	// Refused count the children started and the calls the brain refused (its cap on running threads), over
	// every round.
	Children, Rounds, Started, Refused int
	// FanModelTTFT is the fake model's time to first token in the fan-out.
	FanModelTTFT time.Duration
	// FanStart is each child's first request from the coordinator's answer (which starts the children one after
	// the other), FanStartAppended from its own start's append; FanStep its next request after its bash call
	// (from the fake's end of the answer calling bash); FanModel the fake model's own time per child call.
	// FanReport is from the fake's end of a child's last answer to its report (and idle status) appended.
	FanStart, FanStartAppended, FanStep, FanModel, FanReport Dist
	// Wall is each round's time from the client's user.message to the last child's report appended to the
	// coordinator (with the child's idle status); WallFromAnswer from the fake's end of the coordinator's answer
	// to the same.
	Wall, WallFromAnswer []time.Duration
	// PeakInFlight is the most child model calls the fake model was answering at once, over the rounds.
	PeakInFlight  int
	FanErrors     int
	FanFirstError string
}

// Names of the section's agents: the coordinator's roster holds the worker.
const (
	maWorker      = "bench-worker"
	maCoordinator = "bench-coordinator"
)

// multiagent runs the section on one backend.
func (b *benchRun) multiagent(ctx context.Context, be *benchBackend) error {
	runs, children, rounds := b.cfg.MultiagentRuns, b.cfg.MultiagentChildren, b.cfg.MultiagentRounds
	if runs <= 0 || children <= 0 || rounds <= 0 {
		return fmt.Errorf("runs (%d), children (%d) and rounds (%d) must be positive", runs, children, rounds)
	}
	res := &MultiagentResult{Backend: be.name, Runs: runs, Children: children, Rounds: rounds, FanModelTTFT: cmp.Or(b.cfg.MultiagentTTFT, b.cfg.ModelTTFT)}
	w, closeW, err := b.maServer(ctx, be, "start", b.cfg.ModelTTFT)
	if err != nil {
		return err
	}
	defer closeW()
	b.progress("multiagent: %s, %d coordinator sessions starting one child, alternating with %d single-agent sessions", be.name, runs, runs)
	var start, startAppended, cold, coldResult, warm, warmResult []time.Duration
	var warmPhases [numStepPhases][]time.Duration
	for r := range runs {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d, d2, err := w.childStart(ctx, r)
		if err == nil {
			start, startAppended = append(start, d), append(startAppended, d2)
			var s [4]time.Duration
			var ph [numStepPhases]time.Duration
			if s, ph, err = w.single(ctx, r); err == nil {
				cold, coldResult, warm, warmResult = append(cold, s[0]), append(coldResult, s[1]), append(warm, s[2]), append(warmResult, s[3])
				for i, d := range ph {
					warmPhases[i] = append(warmPhases[i], d)
				}
			}
		}
		if err != nil {
			res.Errors++
			if res.FirstError == "" {
				res.FirstError = err.Error()
				b.progress("multiagent: run %d failed: %v", r, err)
			}
		}
	}
	res.ChildStart, res.ChildStartAppended = Summarize(start), Summarize(startAppended)
	res.SingleCold, res.SingleColdResult = Summarize(cold), Summarize(coldResult)
	res.SingleWarm, res.SingleWarmResult = Summarize(warm), Summarize(warmResult)
	for i, ds := range warmPhases {
		res.SingleWarmPhases[i] = Summarize(ds)
	}
	b.progress("multiagent: child start p50 %s p95 %s ms (from its append p50 %s p95 %s); single-agent next request after a warm bash p50 %s p95 %s ms",
		Ms(res.ChildStart.P50), Ms(res.ChildStart.P95), Ms(res.ChildStartAppended.P50), Ms(res.ChildStartAppended.P95),
		Ms(res.SingleWarm.P50), Ms(res.SingleWarm.P95))

	closeW()
	// The fan-out's children must be in their model calls together: a fake model as slow as a real one.
	w, closeW, err = b.maServer(ctx, be, "fanout", res.FanModelTTFT)
	if err != nil {
		return err
	}
	defer closeW()
	var fan fanSamples
	for r := range rounds {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		b.progress("multiagent: fan-out round %d of %d: one coordinator answer starting %d children", r+1, rounds, children)
		if err := w.fanOut(ctx, r, children, &fan, res); err != nil {
			res.FanErrors++
			if res.FanFirstError == "" {
				res.FanFirstError = err.Error()
			}
			b.progress("multiagent: fan-out round %d failed: %v", r+1, err)
		}
	}
	res.FanStart, res.FanStartAppended, res.FanStep, res.FanModel = Summarize(fan.start), Summarize(fan.startAppended), Summarize(fan.step), Summarize(fan.model)
	res.FanReport = Summarize(fan.report)
	for i, ds := range fan.phases {
		res.FanStepPhases[i] = Summarize(ds)
	}
	if len(res.Wall) > 0 {
		b.progress("multiagent: %d children started, %d refused; first request p50 %s p95 %s ms from its append; next request after bash p50 %s p95 %s ms; wall %s",
			res.Started, res.Refused, Ms(res.FanStartAppended.P50), Ms(res.FanStartAppended.P95), Ms(res.FanStep.P50), Ms(res.FanStep.P95), res.Wall)
	}
	b.rep.Multiagent = res
	if len(start) == 0 && len(res.Wall) == 0 {
		return fmt.Errorf("every run failed; first error: %s", res.FirstError+res.FanFirstError)
	}
	return nil
}

// maServer starts a server of the section, on a fake model of its own of that time to first token (the
// workload keeps the calls of its markers), and creates its agents. close stops both; it may be called twice.
func (b *benchRun) maServer(ctx context.Context, be *benchBackend, name string, ttft time.Duration) (*maWork, func(), error) {
	fake, err := b.startFake(ttft)
	if err != nil {
		return nil, nil, err
	}
	s, err := b.startServer(ctx, "multiagent-"+name+"-"+be.name, serverSpec{fake: fake, backend: be, idle: 30 * time.Second})
	if err != nil {
		fake.close()
		return nil, nil, err
	}
	var once sync.Once
	closeAll := func() { once.Do(func() { s.close(); fake.close() }) }
	coordID, err := maAgents(ctx, s.c)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return &maWork{c: s.c, fake: fake, env: s.envID, coord: coordID, solo: s.agentID}, closeAll, nil
}

// maAgents creates the worker and the coordinator (whose roster is the worker), both with the built-in toolset,
// and returns the coordinator's id.
func maAgents(ctx context.Context, c *Client) (string, error) {
	tools := []apitype.Tool{{Type: apitype.ToolTypeAgentToolset}}
	model := apitype.ModelConfig{ID: "claude-sonnet-4-5"}
	worker, err := c.AgentCreate(ctx, &client.AgentCreateParams{Name: maWorker, Model: model, Tools: tools,
		System: "You are a benchmark worker: do the task you are given."})
	if err != nil {
		return "", err
	}
	roster, err := json.Marshal(map[string]any{"type": "multiagent_20261001",
		"subagents": map[string]any{"type": "enabled", "predefined_agents": []string{worker.ID}, "inline_agents": map[string]string{"type": "disabled"}}})
	if err != nil {
		return "", err
	}
	coord, err := c.AgentCreate(ctx, &client.AgentCreateParams{Name: maCoordinator, Model: model, Tools: tools, Multiagent: roster,
		System: "You are a benchmark coordinator: start workers on tasks."})
	if err != nil {
		return "", err
	}
	return coord.ID, nil
}

// maWork is the section's server, as its workload uses it.
type maWork struct {
	c                *Client
	fake             *fakeModel
	env, coord, solo string // the environment, the coordinator agent, the single agent (bench's, with tools)
}

// maTimeout bounds one session's turn.
const maTimeout = 2 * time.Minute

// turn creates a session of agent, opens its stream, sends marker as its first message and reads the stream,
// handing each event to on, until on says the turn is over. It returns the session's id and when the message was
// sent.
func (w *maWork) turn(ctx context.Context, agent, marker string, on func(ev *Event) (bool, error)) (string, time.Time, error) {
	id, err := w.c.CreateSession(ctx, agent, w.env)
	if err != nil {
		return "", time.Time{}, err
	}
	st, err := w.c.Open(ctx, id)
	if err != nil {
		return id, time.Time{}, err
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(ctx, maTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, st.Close)
	defer stop()
	t0 := time.Now()
	if err := w.c.Say(ctx, id, marker); err != nil {
		return id, t0, err
	}
	for {
		ev, err := st.Next()
		if err != nil {
			if ctx.Err() != nil {
				err = fmt.Errorf("session %s (%s): not over after %v: %w", id, marker, maTimeout, ctx.Err())
			}
			return id, t0, err
		}
		done, err := on(ev)
		if err != nil || done {
			return id, t0, err
		}
	}
}

// eventFields are the fields of a session stream's event that the workload reads.
type eventFields struct {
	// SessionThreadID is set on a child's event cross-posted to the session's stream (and on thread events).
	SessionThreadID   string                 `json:"session_thread_id"`
	ToSessionThreadID string                 `json:"to_session_thread_id"`
	Content           []apitype.ContentBlock `json:"content"`
}

func processedAt(ev *Event) (time.Time, error) {
	if ev.ProcessedAt == nil {
		return time.Time{}, fmt.Errorf("%s event %s has no processed_at", ev.Type, ev.ID)
	}
	return *ev.ProcessedAt, nil
}

func blocksText(bs []apitype.ContentBlock) string {
	var sb strings.Builder
	for _, b := range bs {
		sb.WriteString(b.Text)
	}
	return sb.String()
}

// startInput is start_thread's input starting the worker on task.
func startInput(task string) toolCall {
	in, _ := json.Marshal(map[string]string{"agent": maWorker, "message": task}) // strings always encode
	return toolCall{name: "start_thread", input: string(in)}
}

var bashTrue = toolCall{name: "bash", input: `{"command":"true"}`}

// callOf returns the call of the task marker with that many messages.
func callOf(calls []modelCall, marker string, messages int) (modelCall, bool) {
	for _, c := range calls {
		if c.Messages == messages && strings.Contains(c.Task, marker) {
			return c, true
		}
	}
	return modelCall{}, false
}

// childStart runs one coordinator session whose first answer starts one child (which answers with text), and
// returns the child's start from the coordinator's answer and from the start's append.
func (w *maWork) childStart(ctx context.Context, r int) (fromAnswer, fromAppend time.Duration, err error) {
	marker, task := fmt.Sprintf("<ma start %d>", r), fmt.Sprintf("<ma start %d child>", r)
	w.fake.scriptCalls(marker, 1, startInput(task))
	var appended time.Time
	reports := 0
	_, _, err = w.turn(ctx, w.coord, marker, func(ev *Event) (bool, error) {
		var f eventFields
		switch ev.Type {
		case apitype.EventAgentThreadMessageSent:
			if err := ev.Decode(&f); err != nil {
				return false, err
			}
			if f.SessionThreadID == "" && strings.Contains(blocksText(f.Content), task) {
				at, err := processedAt(ev)
				appended = at
				return false, err
			}
		case apitype.EventAgentThreadMessageReceived:
			reports++
		}
		return ev.TurnOver() && reports > 0, nil
	})
	if err != nil {
		return 0, 0, err
	}
	if appended.IsZero() {
		return 0, 0, fmt.Errorf("%s: no agent.thread_message_sent carried the child's task", marker)
	}
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	calls, err := w.fake.takeCalls(tctx, func(cs []modelCall) bool {
		_, ok1 := callOf(cs, marker, 1)
		_, ok2 := callOf(cs, task, 1)
		return ok1 && ok2
	})
	if err != nil {
		return 0, 0, err
	}
	coord, _ := callOf(calls, marker, 1)
	child, _ := callOf(calls, task, 1)
	return child.Received.Sub(coord.Done), child.Received.Sub(appended), nil
}

// single runs one single-agent session of two bash calls, and returns its next request after the first (cold)
// and the second (warm), each from the answer's end and from the tool result's append, and the warm one's
// phases.
func (w *maWork) single(ctx context.Context, r int) ([4]time.Duration, [numStepPhases]time.Duration, error) {
	var none [numStepPhases]time.Duration
	marker := fmt.Sprintf("<ma single %d>", r)
	w.fake.scriptCalls(marker, 1, bashTrue)
	w.fake.scriptCalls(marker, 3, bashTrue)
	var uses, results []time.Time
	_, _, err := w.turn(ctx, w.solo, marker, func(ev *Event) (bool, error) {
		switch ev.Type {
		case apitype.EventAgentToolUse, apitype.EventAgentToolResult:
			at, err := processedAt(ev)
			if ev.Type == apitype.EventAgentToolUse {
				uses = append(uses, at)
			} else {
				results = append(results, at)
			}
			return false, err
		}
		return ev.TurnOver(), nil
	})
	if err != nil {
		return [4]time.Duration{}, none, err
	}
	if len(uses) != 2 || len(results) != 2 {
		return [4]time.Duration{}, none, fmt.Errorf("%s: %d tool calls and %d results, want 2", marker, len(uses), len(results))
	}
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	calls, err := w.fake.takeCalls(tctx, func(cs []modelCall) bool {
		_, ok := callOf(cs, marker, 5)
		return ok
	})
	if err != nil {
		return [4]time.Duration{}, none, err
	}
	c1, ok1 := callOf(calls, marker, 1)
	c3, ok3 := callOf(calls, marker, 3)
	c5, _ := callOf(calls, marker, 5)
	if !ok1 || !ok3 {
		return [4]time.Duration{}, none, fmt.Errorf("%s: the fake model lacks a call of the session", marker)
	}
	return [4]time.Duration{c3.Received.Sub(c1.Done), c3.Received.Sub(results[0]), c5.Received.Sub(c3.Done), c5.Received.Sub(results[1])},
		stepPhases(c3.Done, uses[1], results[1], c5.Received), nil
}

// Phases of a step: from the fake model's end of an answer calling a tool to its receipt of the next request.
const (
	stepAnswer  = iota // -> agent.tool_use appended: reading the answer's end, the append
	stepTool           // -> agent.tool_result appended: the tool call (in the sandbox), the append
	stepRequest        // -> the fake model received the next request: the wake-up, building it, the HTTP hop
	numStepPhases
)

// stepPhaseNames name the phases in reports.
var stepPhaseNames = [numStepPhases]string{"answer appended (`agent.tool_use`)", "`bash true` run and its result appended", "to the next request"}

func stepPhases(done, use, result, next time.Time) [numStepPhases]time.Duration {
	return [numStepPhases]time.Duration{stepAnswer: use.Sub(done), stepTool: result.Sub(use), stepRequest: next.Sub(result)}
}

// fanSamples are the fan-out's per-child samples over its rounds.
type fanSamples struct {
	start, startAppended, step, model, report []time.Duration
	phases                                    [numStepPhases][]time.Duration
}

// fanOut runs one coordinator session whose first answer is a bash call (which provisions the sandbox) and n
// start_thread calls; each child calls bash, then answers with text, which reports back to the coordinator.
func (w *maWork) fanOut(ctx context.Context, r, n int, fan *fanSamples, res *MultiagentResult) error {
	marker := fmt.Sprintf("<ma fan %d>", r)
	calls := []toolCall{bashTrue}
	for k := range n {
		task := fmt.Sprintf("<ma fan %d c%d>", r, k)
		calls = append(calls, startInput(task))
		w.fake.scriptCalls(task, 1, bashTrue)
	}
	w.fake.scriptCalls(marker, 1, calls...)
	appended := map[string]time.Time{} // task -> its start's append
	threads := map[string]string{}     // task -> its thread
	idled := map[string]time.Time{}    // thread -> its report's append (with its idle status)
	var lastReport time.Time
	results, created, reports := 0, 0, 0
	session, sent, err := w.turn(ctx, w.coord, marker, func(ev *Event) (bool, error) {
		var f eventFields
		if err := ev.Decode(&f); err != nil {
			return false, err
		}
		switch {
		case ev.Type == apitype.EventSessionThreadStatusIdle:
			// A child's turn ended: its report to the coordinator is in the same append (the report itself,
			// agent.thread_message_received, is an input: its processed_at is when the coordinator takes it).
			at, err := processedAt(ev)
			if err != nil {
				return false, err
			}
			reports++
			lastReport = at
			idled[f.SessionThreadID] = at
		case f.SessionThreadID != "" && ev.Type != apitype.EventSessionThreadCreated:
			// another event of a child's, cross-posted
		case ev.Type == apitype.EventAgentToolResult:
			results++
		case ev.Type == apitype.EventSessionThreadCreated:
			created++
		case ev.Type == apitype.EventAgentThreadMessageSent:
			at, err := processedAt(ev)
			if err != nil {
				return false, err
			}
			appended[blocksText(f.Content)] = at
			threads[blocksText(f.Content)] = f.ToSessionThreadID
		}
		return ev.TurnOver() && results >= len(calls) && reports >= created, nil
	})
	// (A refused child's scripted answer stays queued in the fake model: its marker never recurs.)
	if err != nil {
		return err
	}
	res.Started += created
	res.Refused += n - created
	if created == 0 {
		return fmt.Errorf("%s: no child started", marker)
	}
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got, err := w.fake.takeCalls(tctx, func(cs []modelCall) bool {
		if _, ok := callOf(cs, marker, 1); !ok {
			return false
		}
		for task := range appended {
			if _, ok := callOf(cs, task, 3); !ok {
				return false
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	coord, _ := callOf(got, marker, 1)
	var spans [][2]time.Time
	for task, at := range appended {
		c1, ok1 := callOf(got, task, 1)
		c3, ok3 := callOf(got, task, 3)
		if !ok1 || !ok3 {
			return fmt.Errorf("%s: the fake model lacks a call of the child %s", marker, task)
		}
		fan.start = append(fan.start, c1.Received.Sub(coord.Done))
		fan.startAppended = append(fan.startAppended, c1.Received.Sub(at))
		fan.step = append(fan.step, c3.Received.Sub(c1.Done))
		fan.report = append(fan.report, idled[threads[task]].Sub(c3.Done))
		use, result, err := w.toolTimes(ctx, session, threads[task])
		if err != nil {
			return err
		}
		for i, d := range stepPhases(c1.Done, use, result, c3.Received) {
			fan.phases[i] = append(fan.phases[i], d)
		}
		fan.model = append(fan.model, c1.Done.Sub(c1.Received), c3.Done.Sub(c3.Received))
		spans = append(spans, [2]time.Time{c1.Received, c1.Done}, [2]time.Time{c3.Received, c3.Done})
	}
	res.Wall = append(res.Wall, lastReport.Sub(sent))
	res.WallFromAnswer = append(res.WallFromAnswer, lastReport.Sub(coord.Done))
	res.PeakInFlight = max(res.PeakInFlight, peak(spans))
	return nil
}

// toolTimes returns when the thread's first agent.tool_use and agent.tool_result were appended.
func (w *maWork) toolTimes(ctx context.Context, session, thread string) (use, result time.Time, err error) {
	page, err := w.c.ThreadEventList(ctx, session, thread, &client.EventListParams{Limit: 1000})
	if err != nil {
		return use, result, err
	}
	for _, ev := range page.Data {
		switch {
		case ev.Type == apitype.EventAgentToolUse && use.IsZero() && ev.ProcessedAt != nil:
			use = *ev.ProcessedAt
		case ev.Type == apitype.EventAgentToolResult && result.IsZero() && ev.ProcessedAt != nil:
			result = *ev.ProcessedAt
		}
	}
	if use.IsZero() || result.IsZero() {
		return use, result, fmt.Errorf("thread %s of session %s: no tool call and result among its events", thread, session)
	}
	return use, result, nil
}

// peak returns the most intervals that overlap at one time.
func peak(spans [][2]time.Time) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, s := range spans {
		edges = append(edges, edge{s[0], 1}, edge{s[1], -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // an end before a start at the same instant
	})
	n, most := 0, 0
	for _, e := range edges {
		n += e.delta
		most = max(most, n)
	}
	return most
}

// writeSummary writes the section's lines of the summary (stdout).
func (m *MultiagentResult) writeSummary(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "multi-agent (to the next model request)\tfrom the answer p50/p95 ms\tfrom the append p50/p95 ms\tsamples")
	fmt.Fprintf(tw, "child's start (start_thread)\t%s\t%s\t%d\n", dist2(m.ChildStart), dist2(m.ChildStartAppended), m.ChildStart.N)
	fmt.Fprintf(tw, "single agent, after a warm bash\t%s\t%s\t%d\n", dist2(m.SingleWarm), dist2(m.SingleWarmResult), m.SingleWarm.N)
	fmt.Fprintf(tw, "fan-out child's start (%d per answer)\t%s\t%s\t%d\n", m.Children, dist2(m.FanStart), dist2(m.FanStartAppended), m.FanStart.N)
	fmt.Fprintf(tw, "fan-out child, after its bash\t%s\t\t%d\n", dist2(m.FanStep), m.FanStep.N)
	tw.Flush()
	if len(m.Wall) > 0 {
		fmt.Fprintf(w, "fan-out: %d children started, %d refused; wall time to every child's report %s (per round)\n", m.Started, m.Refused, durations(m.Wall))
	}
}

// durations formats durations in milliseconds, comma-separated.
func durations(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = Ms(d) + " ms"
	}
	return strings.Join(parts, ", ")
}

// Markdown renders the section; modelTTFT and perToken are the fake model's.
func (m *MultiagentResult) Markdown(modelTTFT, perToken time.Duration) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("### Multi-agent sessions\n\n")
	p("Backend %s. A coordinator agent (`multiagent_20261001`, its roster one predefined agent, `%s`; both with the built-in ", m.Backend, maWorker)
	p("toolset) and the benchmark's single agent, on one server. Every figure runs from one event of the fake model's to another ")
	p("(one host, one clock): from when it finished sending an answer (its last byte flushed) to when it received the next request ")
	p("that answer leads to, which is when that request's first token could start. \"From the append\" starts instead at the ")
	p("`processed_at` of the event the brain appended in between: the child's start (`session.thread_created` and its task, one ")
	p("append) or the tool result.\n\n")
	p("**A child's start** (%d coordinator sessions, one after the other, alternating with %d single-agent sessions; fake model ", m.Runs, m.Runs)
	p("TTFT %s, %s per later token): the ", modelTTFT, perToken)
	p("coordinator's first answer is one `start_thread` call; the child answers its task with text, which reports back to the ")
	p("coordinator. The single-agent session's answers are `bash true` twice, then text: the next request after the first call ")
	p("includes the sandbox's provisioning (hands are lazy), after the second it does not.\n\n")
	p("| from the answer's end to the next request | n | from the answer, p50 / p95 | from the append, p50 / p95 |\n|---|---|---|---|\n")
	p("| coordinator's `start_thread` → the child's first request | %d | %s | %s |\n", m.ChildStart.N, dist2(m.ChildStart), dist2(m.ChildStartAppended))
	p("| single agent: `bash true` in a warm sandbox → next request | %d | %s | %s |\n", m.SingleWarm.N, dist2(m.SingleWarm), dist2(m.SingleWarmResult))
	p("| single agent: first `bash true` (sandbox provisioned) → next request | %d | %s | %s |\n\n", m.SingleCold.N, dist2(m.SingleCold), dist2(m.SingleColdResult))
	if m.Errors > 0 {
		p("%d runs failed; first error: `%s`\n\n", m.Errors, strings.ReplaceAll(m.FirstError, "`", "'"))
	}
	p("**A fan-out** (%d %s, one after the other, on a server of its own whose fake model's TTFT is %s, as slow as a real ", m.Rounds, plural(m.Rounds, "session"), m.FanModelTTFT)
	p("model's, so that the children's calls overlap): the coordinator's first answer is `bash true` (which provisions the ")
	p("session's sandbox) and %d `start_thread` calls, which the brain runs one after the other; each child calls `bash true` ", m.Children)
	p("(in a shell of its own in the session's sandbox), then answers with text, which reports back to the coordinator. The brain ")
	p("runs at most 25 threads of a session at once, the coordinator included: a start beyond that is refused with a tool error. ")
	p("%d children started, %d calls refused; at most %d child model calls were in flight at once.\n\n", m.Started, m.Refused, m.PeakInFlight)
	p("| per child | n | p50 / p95 / p99 | max |\n|---|---|---|---|\n")
	p("| first request, from the coordinator's answer (the starts run one after the other) | %d | %s | %s |\n", m.FanStart.N, dist3(m.FanStart), Ms(m.FanStart.Max))
	p("| first request, from its own start's append | %d | %s | %s |\n", m.FanStartAppended.N, dist3(m.FanStartAppended), Ms(m.FanStartAppended.Max))
	p("| next request after its `bash true` answer (the call in its own shell, the result's append) | %d | %s | %s |\n", m.FanStep.N, dist3(m.FanStep), Ms(m.FanStep.Max))
	p("| its report (and idle status) appended, from its last answer's end | %d | %s | %s |\n", m.FanReport.N, dist3(m.FanReport), Ms(m.FanReport.Max))
	p("| the fake model's own time per child call | %d | %s | %s |\n\n", m.FanModel.N, dist3(m.FanModel), Ms(m.FanModel.Max))
	p("Where a step's time goes, from the events' `processed_at` (the fan-out children's read from their threads' events), p50 / p95 in ms:\n\n| step |")
	for _, n := range stepPhaseNames {
		p(" %s |", n)
	}
	p("\n|---|%s\n| single agent, warm sandbox |", strings.Repeat("---|", numStepPhases))
	for _, d := range m.SingleWarmPhases {
		p(" %s |", dist2(d))
	}
	p("\n| fan-out child (a new shell of its own) |")
	for _, d := range m.FanStepPhases {
		p(" %s |", dist2(d))
	}
	p("\n\n")
	if len(m.Wall) > 0 {
		p("Wall time until every child had reported back (the last report's append), per session: from the client's `user.message` ")
		p("%s; from the end of the coordinator's answer %s. Each child makes two model calls (fake TTFT %s), in parallel ", durations(m.Wall), durations(m.WallFromAnswer), m.FanModelTTFT)
		p("with the others': with no overhead at all, the last report would come two model calls after the last child's start.\n\n")
	}
	if m.FanErrors > 0 {
		p("%d fan-out sessions failed; first error: `%s`\n\n", m.FanErrors, strings.ReplaceAll(m.FanFirstError, "`", "'"))
	}
	return b.String()
}

// plural is noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return noun
	}
	return noun + "s"
}
