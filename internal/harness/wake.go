package harness

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/store"
)

// eventPage is how many events a brain reads from the log at a time.
const eventPage = 200

// Tool result texts the model sees.
const (
	msgInterrupted    = "interrupted by the user"
	msgOutcomeUnknown = "The brain running this tool call stopped before it reported a result, so its outcome is unknown: it may have run partly, fully or not at all. Check its effects before running it again."
	msgNoHands        = "no sandbox is configured on this server, so built-in tools cannot run"
)

// run is one brain's work on one claimed session: everything it knows it has read from the log.
type run struct {
	b      *Brain
	lease  *leaseHolder
	ctx    context.Context // cancelled when the lease is lost or the brain stops
	cancel context.CancelCauseFunc
	// fresh holds the tool uses this run appended or saw confirmed, and has not run yet. Any other approved tool
	// use without a result was cut short by a crash.
	fresh map[string]bool

	// lead is what the next append carries ahead of its own events (see modelTurn).
	lead *lead
	// released: an append released the lease (the turn's last); the run writes nothing more.
	released bool

	sess  *apitype.Session
	env   apitype.EnvConfig
	tools *toolset
	usage apitype.SessionUsage
	tail  *tail
	// activeFrom is when this run last saw the session start working (zero while idle): the time until it idles
	// again is added to the session's active seconds.
	activeFrom time.Time
	// seenSeq is the last sequence number the current state was derived from: a client event after it may not
	// have been acted on yet.
	seenSeq int64
}

// loop works the session until nothing is left to do, or the work is cancelled.
func (r *run) loop() error {
	if err := r.load(); err != nil {
		return err
	}
	for {
		if r.ctx.Err() != nil {
			return r.stopped()
		}
		acted, err := r.step()
		if r.released {
			return err
		}
		if r.ctx.Err() != nil {
			return r.stopped()
		}
		if err != nil || !acted {
			// Nothing left to do: the release counts the wake-ups the claim saw as handled. A client event
			// that arrived since keeps the session runnable, and the next claim looks again.
			return err
		}
	}
}

// stopped ends the work after cancellation. A lost lease ends it at once; a stopping brain hands a session in
// the middle of a turn back as rescheduled (and runnable), so the next brain resumes it without waiting for
// the lease to expire.
func (r *run) stopped() error {
	if errors.Is(context.Cause(r.ctx), errLeaseLost) || r.tail == nil {
		return nil
	}
	if st, err := derive(r.tail); err != nil || !st.running() {
		return err
	}
	ev, err := apitype.MakeEvent(apitype.EventSessionStatusRescheduled, nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), r.b.cfg.LeaseTTL)
	defer cancel()
	_, err = r.b.cfg.Store.EventAppend(ctx, &store.EventAppendParams{
		SessionID: r.sess.ID, Events: []apitype.NewEvent{ev}, Lease: r.lease.get(),
		Status: apitype.StatusRescheduling, Wake: true,
	})
	if err != nil {
		return fmt.Errorf("reschedule: %w", err)
	}
	return nil
}

// release gives the session up. With handled, the wake-ups seen at the last renewal count as handled;
// without, none does and the session stays runnable.
func (r *run) release(handled bool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), r.b.cfg.LeaseTTL)
	defer cancel()
	l := r.lease.get()
	if !handled {
		l.WakeSeq = 0
	}
	if err := r.b.cfg.Store.LeaseRelease(ctx, l); err != nil {
		return fmt.Errorf("release %s: %w", l.SessionID, err)
	}
	return nil
}

// load reads the session, its environment and the log's tail.
func (r *run) load() error {
	id := r.lease.get().SessionID
	sess, err := r.b.cfg.Store.SessionGet(r.ctx, id)
	if err != nil {
		return fmt.Errorf("get session %s: %w", id, err)
	}
	r.sess, r.usage = sess, sess.Usage
	r.tools = resolveTools(sess.Agent.Tools)
	if sess.EnvironmentID != "" {
		env, err := r.b.cfg.Store.EnvironmentGet(r.ctx, sess.EnvironmentID)
		switch {
		case err == nil:
			r.env = env.Config
		case !errors.Is(err, store.ErrNotFound):
			return fmt.Errorf("get environment %s: %w", sess.EnvironmentID, err)
		}
	}
	return r.loadTail()
}

// loadTail reads the log backwards from its end, a page at a time, down to the last compaction's UpToSeq (or
// the start). It never reads the part a summary replaced.
func (r *run) loadTail() error {
	t := &tail{}
	var rev []apitype.Event
	stopAt := int64(-1) // once a compaction is found: the last seq its summary covers
	before := int64(0)
walk:
	for {
		page, err := r.b.cfg.Store.EventList(r.ctx, &store.EventListParams{
			SessionID: r.sess.ID, BeforeSeq: before, Desc: true, Limit: eventPage,
		})
		if err != nil {
			return fmt.Errorf("read log: %w", err)
		}
		for _, e := range page {
			if t.lastSeq == 0 {
				t.lastSeq = e.Seq
			}
			if stopAt >= 0 && e.Seq <= stopAt {
				break walk
			}
			if stopAt < 0 && e.Type == apitype.EventAgentContextCompacted {
				var c apitype.ContextCompacted
				if err := e.DecodeData(&c); err != nil {
					return err
				}
				t.summary, t.upToSeq, stopAt = c.Summary, c.UpToSeq, c.UpToSeq
			}
			rev = append(rev, e)
		}
		if len(page) < eventPage {
			break
		}
		before = page[len(page)-1].Seq
	}
	slices.Reverse(rev)
	t.events = rev
	if t.upToSeq > 0 && !slices.ContainsFunc(t.events, isStatus) {
		last, err := r.b.cfg.Store.EventList(r.ctx, &store.EventListParams{
			SessionID: r.sess.ID, BeforeSeq: t.upToSeq + 1, Desc: true, Limit: 1,
			Types: []string{apitype.EventSessionStatusRunning, apitype.EventSessionStatusIdle, apitype.EventSessionStatusRescheduled},
		})
		if err != nil {
			return fmt.Errorf("read log: %w", err)
		}
		if len(last) > 0 {
			t.priorStatus = last[0].Type
		}
	}
	r.tail = t
	if st, err := derive(t); err == nil && st.running() {
		r.activeFrom = time.Now() // a turn in progress: count from the takeover
	}
	return nil
}

func isStatus(e apitype.Event) bool {
	switch e.Type {
	case apitype.EventSessionStatusRunning, apitype.EventSessionStatusIdle, apitype.EventSessionStatusRescheduled:
		return true
	}
	return false
}

// refresh reads the events appended since the tail's last one.
func (r *run) refresh() error {
	for {
		page, err := r.b.cfg.Store.EventList(r.ctx, &store.EventListParams{
			SessionID: r.sess.ID, AfterSeq: r.tail.lastSeq, Limit: eventPage,
		})
		if err != nil {
			return fmt.Errorf("read log: %w", err)
		}
		r.tail.events = append(r.tail.events, page...)
		if len(page) > 0 {
			r.tail.lastSeq = page[len(page)-1].Seq
		}
		if len(page) < eventPage {
			return nil
		}
	}
}

// compactTo drops the events a new summary covers.
func (t *tail) compactTo(summary string, upToSeq int64) {
	keep := t.events[:0]
	for _, e := range t.events {
		if e.Seq > upToSeq {
			keep = append(keep, e)
		} else if isStatus(e) {
			t.priorStatus = e.Type
		}
	}
	t.events, t.summary, t.upToSeq = keep, summary, upToSeq
}

// settled reports whether every client event in the tail has been processed: a turn that ends then leaves
// nothing for this run to do, and may release the lease with its last append. A client event the tail lacks
// arrived after the claim, and its wake-up keeps the session runnable past such a release.
func (t *tail) settled() bool {
	for _, e := range t.events {
		if e.ProcessedAt == nil && apitype.IsUserEvent(e.Type) {
			return false
		}
	}
	return true
}

// setProcessed sets processed_at on the events with the given sequence numbers that have none.
func (t *tail) setProcessed(seqs []int64, at time.Time) {
	for i := range t.events {
		if t.events[i].ProcessedAt == nil && slices.Contains(seqs, t.events[i].Seq) {
			t.events[i].ProcessedAt = &at
		}
	}
}

// lead is what a model turn announces before its model request: the session running, and the client events the
// request picks up, marked processed. It rides on the next append (the request's span.model_request_start), so
// that the announcement and the request's start are one write, and a crash can never leave a client event
// marked processed without the turn that picked it up.
type lead struct {
	events    []apitype.NewEvent
	status    string
	processed []apitype.Event
}

// append appends events fenced by the lease, with the session status and usage they imply, and adds them to
// the tail. A pending lead goes first, in the same append; the events returned are the caller's. It refuses
// once the work is cancelled: a brain that lost its lease or is stopping writes nothing.
func (r *run) append(status string, usage *apitype.SessionUsage, evs ...apitype.NewEvent) ([]apitype.Event, error) {
	return r.appendP(&store.EventAppendParams{Events: evs, Status: status, Usage: usage})
}

// appendP is append with the parameters spelled out; with p.Release, the run is over once it succeeds.
func (r *run) appendP(p *store.EventAppendParams) ([]apitype.Event, error) {
	if r.ctx.Err() != nil {
		return nil, context.Cause(r.ctx)
	}
	status, evs := p.Status, p.Events
	led := 0
	if l := r.lead; l != nil {
		led = len(l.events)
		p.Events = append(slices.Clip(l.events), evs...)
		p.Status = cmp.Or(status, l.status)
		for _, e := range l.processed {
			p.MarkProcessed = append(p.MarkProcessed, e.Seq)
		}
	}
	status = p.Status
	if status == apitype.StatusIdle && !r.activeFrom.IsZero() {
		p.ActiveSeconds = time.Since(r.activeFrom).Seconds()
	}
	out, err := r.appendRaw(p)
	if err != nil {
		return nil, err
	}
	r.lead, r.released = nil, p.Release
	switch {
	case status == apitype.StatusIdle:
		r.activeFrom = time.Time{}
	case r.activeFrom.IsZero() && (status == apitype.StatusRunning || status == apitype.StatusRescheduling):
		r.activeFrom = time.Now()
	}
	if len(out) > 0 {
		r.tail.setProcessed(p.MarkProcessed, out[0].CreatedAt)
	}
	if len(out) > 0 && out[0].Seq == r.tail.lastSeq+1 {
		r.tail.events = append(r.tail.events, out...)
		r.tail.lastSeq = out[len(out)-1].Seq
		return out[led:], nil
	}
	if r.released {
		return out[led:], nil // the run is over: nothing reads the tail again
	}
	return out[led:], r.refresh()
}

// appendRaw appends with the lease and does not touch the tail; it is safe from any goroutine. An append that
// has started finishes even if the work is cancelled meanwhile.
func (r *run) appendRaw(p *store.EventAppendParams) ([]apitype.Event, error) {
	p.SessionID, p.Lease = r.sess.ID, r.lease.get()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), r.b.cfg.LeaseTTL)
	defer cancel()
	out, err := r.b.cfg.Store.EventAppend(ctx, p)
	if err != nil {
		if errors.Is(err, store.ErrLeaseLost) {
			r.cancel(errLeaseLost)
		}
		return nil, fmt.Errorf("append to %s: %w", r.sess.ID, err)
	}
	return out, nil
}

// markProcessed sets processed_at on client events, in the log and in the tail.
func (r *run) markProcessed(evs []apitype.Event) error {
	if len(evs) == 0 {
		return nil
	}
	if r.ctx.Err() != nil {
		return context.Cause(r.ctx)
	}
	seqs := make([]int64, len(evs))
	for i, e := range evs {
		seqs[i] = e.Seq
	}
	now := apitype.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), r.b.cfg.LeaseTTL)
	defer cancel()
	err := r.b.cfg.Store.EventMarkProcessed(ctx, &store.EventMarkProcessedParams{
		SessionID: r.sess.ID, Lease: r.lease.get(), Seqs: seqs, At: now,
	})
	if err != nil {
		if errors.Is(err, store.ErrLeaseLost) {
			r.cancel(errLeaseLost)
		}
		return fmt.Errorf("mark processed: %w", err)
	}
	r.tail.setProcessed(seqs, now)
	return nil
}

// step takes the next step the log calls for. It reports whether it did anything.
func (r *run) step() (bool, error) {
	if err := r.refresh(); err != nil {
		return false, err
	}
	st, err := derive(r.tail)
	if err != nil {
		return false, err
	}
	r.seenSeq = r.tail.lastSeq

	// 1. An interrupt jumps the queue.
	if ints := st.unprocessedOf(apitype.EventUserInterrupt); len(ints) > 0 {
		return true, r.interrupt(st, ints)
	}

	// 2. Crash recovery: close a model call that never ended, and give every tool call that may have run
	// without reporting (rule 8), or was refused, its error result.
	if st.openSpan != nil {
		_, err := r.append("", nil, spanEnd(st.openSpan.ID, true, apitype.SpanUsage{}))
		return true, err
	}
	var results []apitype.NewEvent
	for _, u := range st.open() {
		switch {
		case u.refused():
			results = append(results, toolResult(u.ev.ID, true, r.tools.route(u.data.Name).reason))
		case u.approved() && !r.fresh[u.ev.ID] && !r.selfHosted():
			results = append(results, toolResult(u.ev.ID, true, msgOutcomeUnknown))
		}
	}
	if len(results) > 0 {
		_, err := r.append("", nil, results...)
		return true, err
	}

	// 3. The client's answers: confirmations and tool results.
	if acted, err := r.answers(st); acted || err != nil {
		return acted, err
	}

	// 4. Run the approved built-in tools, one at a time, in order.
	if !r.selfHosted() {
		for _, u := range st.open() {
			if u.approved() && r.fresh[u.ev.ID] {
				return true, r.execute(u)
			}
		}
	}

	// 5. Calls only the client can resolve: idle with requires_action until it does.
	if open := st.open(); len(open) > 0 {
		ids := make([]string, len(open))
		for i, u := range open {
			ids[i] = u.ev.ID
		}
		if st.idle != nil && st.idle.StopReason.Type == apitype.StopRequiresAction && slices.Equal(st.idle.StopReason.EventIDs, ids) {
			return false, nil // already said so; queued messages wait for the answers
		}
		_, err := r.append(apitype.StatusIdle, nil, idleEvent(apitype.StopReason{Type: apitype.StopRequiresAction, EventIDs: ids}))
		return true, err
	}

	// 6. The model's turn: new client messages, or tool results it has not seen.
	msgs := st.unprocessedOf(apitype.EventUserMessage, apitype.EventSystemMessage)
	if len(msgs) > 0 || (st.running() && st.lastSide == "user") {
		return true, r.modelTurn(st, msgs)
	}

	// 7. A turn whose last answer is in the log but whose end is not.
	if st.running() {
		_, err := r.append(apitype.StatusIdle, nil, idleEvent(apitype.StopReason{Type: apitype.StopEndTurn}))
		return true, err
	}

	// 8. Client events nothing acts on (an outcome definition, an answer to a call already resolved).
	if len(st.unprocessed) > 0 {
		return true, r.markProcessed(st.unprocessed)
	}
	return false, nil
}

// selfHosted reports whether the client runs the built-in tools (a self_hosted environment).
func (r *run) selfHosted() bool { return r.env.Type == "self_hosted" }

// interrupt ends the turn: a model call in flight is closed as failed, every open tool call gets an error
// result, and the session goes idle with end_turn. Client events queued behind the interrupt stay queued.
func (r *run) interrupt(st *state, ints []apitype.Event) error {
	var evs []apitype.NewEvent
	if st.openSpan != nil {
		evs = append(evs, spanEnd(st.openSpan.ID, true, apitype.SpanUsage{}))
	}
	open := st.open()
	for _, u := range open {
		evs = append(evs, toolResult(u.ev.ID, true, msgInterrupted))
	}
	status := ""
	if st.running() || len(evs) > 0 || (st.idle != nil && st.idle.StopReason.Type != apitype.StopEndTurn) {
		evs = append(evs, idleEvent(apitype.StopReason{Type: apitype.StopEndTurn}))
		status = apitype.StatusIdle
	}
	if len(evs) > 0 {
		if _, err := r.append(status, nil, evs...); err != nil {
			return err
		}
	}
	return r.markProcessed(ints)
}

// answers acts on the client's confirmations and tool results. A confirmation is marked processed before its
// tool runs, so a crash in between leaves a call the next brain reports as of unknown outcome, never one it runs
// twice.
func (r *run) answers(st *state) (bool, error) {
	confs := st.unprocessedOf(apitype.EventUserToolConfirmation)
	results := st.unprocessedOf(apitype.EventUserCustomToolResult, apitype.EventUserToolResult)
	if len(confs) == 0 && len(results) == 0 {
		return false, nil
	}
	if st.idle != nil && st.idle.StopReason.Type == apitype.StopRequiresAction {
		if _, err := r.append(apitype.StatusRunning, nil, mustEvent(apitype.EventSessionStatusRunning, nil)); err != nil {
			return true, err
		}
	}
	var denials []apitype.NewEvent
	var allowed []string
	for _, c := range confs {
		var conf apitype.UserToolConfirmation
		if err := c.DecodeData(&conf); err != nil {
			return true, err
		}
		u := st.byID[conf.ToolUseID]
		if u == nil || u.resolved || u.custom || u.confirmed != "" || u.data.EvaluatedPermission != "ask" {
			continue // nothing to confirm: marked processed below
		}
		if conf.Result == "allow" {
			allowed = append(allowed, u.ev.ID)
			continue
		}
		msg := "The user denied this tool call."
		if conf.DenyMessage != "" {
			msg += " Their message: " + conf.DenyMessage
		}
		denials = append(denials, toolResult(u.ev.ID, true, msg))
	}
	if len(denials) > 0 {
		if _, err := r.append("", nil, denials...); err != nil {
			return true, err
		}
	}
	if err := r.markProcessed(append(confs, results...)); err != nil {
		return true, err
	}
	for _, id := range allowed {
		r.fresh[id] = true
	}
	return true, nil
}

// execute runs an approved built-in tool in the hands and appends its result. The model sees a sandbox failure
// as an error result; the next call provisions a fresh sandbox from the same recipe.
func (r *run) execute(u *toolUse) error {
	delete(r.fresh, u.ev.ID)
	if r.b.cfg.Hands == nil {
		_, err := r.append("", nil, toolResult(u.ev.ID, true, msgNoHands))
		return err
	}
	input := u.data.Input
	if len(input) == 0 {
		input = json.RawMessage("{}")
	}
	call := &sandbox.Call{Recipe: r.recipe(), Name: u.data.Name, Input: input, OnProvision: r.provisionReporter()}
	ctx, done := r.watchInterrupts()
	res, err := r.b.cfg.Hands.Execute(ctx, call)
	interrupted := done()
	var ev apitype.NewEvent
	switch {
	case interrupted:
		ev = toolResult(u.ev.ID, true, msgInterrupted)
	case r.ctx.Err() != nil:
		return context.Cause(r.ctx)
	case err != nil && len(res.Content) > 0:
		// The hands explained the failure for the model.
		ev = mustEvent(apitype.EventAgentToolResult, apitype.AgentToolResult{ToolUseID: u.ev.ID, Content: res.Content, IsError: true})
	case err != nil:
		ev = toolResult(u.ev.ID, true, fmt.Sprintf("The sandbox failed while running this tool, so its outcome is unknown (%v). The next tool call gets a fresh sandbox.", err))
	default:
		ev = mustEvent(apitype.EventAgentToolResult, apitype.AgentToolResult{ToolUseID: u.ev.ID, Content: res.Content, IsError: res.IsError})
	}
	_, err = r.append("", nil, ev)
	return err
}

// recipe is what the hands need to (re)build the session's sandbox.
func (r *run) recipe() sandbox.Recipe {
	rec := sandbox.Recipe{SessionID: r.sess.ID, Environment: r.env, Resources: r.sess.Resources}
	if r.b.cfg.WorkspaceRoot != "" {
		rec.WorkspaceDir = filepath.Join(r.b.cfg.WorkspaceRoot, r.sess.ID)
	}
	return rec
}

// provisionReporter returns the OnProvision callback that puts sandbox provisioning into the log as
// span.sandbox_provision_start / span.sandbox_provision_end.
func (r *run) provisionReporter() func(sandbox.ProvisionReport) {
	var mu sync.Mutex
	startID := ""
	return func(p sandbox.ProvisionReport) {
		mu.Lock()
		defer mu.Unlock()
		var ev apitype.NewEvent
		if !p.Done {
			ev = mustEvent(apitype.EventSpanSandboxProvisionStart, apitype.SandboxProvisionStart{Backend: p.Backend})
		} else {
			end := apitype.SandboxProvisionEnd{
				ProvisionStartID: startID, Backend: p.Backend, IsError: p.Err != nil,
				DurationMS: float64(p.Duration) / float64(time.Millisecond),
			}
			if p.Err != nil {
				end.Error = p.Err.Error()
			}
			ev = mustEvent(apitype.EventSpanSandboxProvisionEnd, end)
		}
		events := append([]apitype.NewEvent{ev}, resourceErrors(p.ResourceErrors)...)
		out, err := r.appendRaw(&store.EventAppendParams{Events: events})
		if err != nil {
			r.b.cfg.Logger.Warn("provision span not logged", "session_id", r.sess.ID, "err", err)
			return
		}
		if !p.Done && len(out) > 0 {
			startID = out[0].ID
		}
	}
}

// resourceErrors are the session.error events for session resources that could not be placed in the workspace:
// as the hosted service does, retry_status retrying, and the session continues without them.
func resourceErrors(errs []*sandbox.ResourceError) []apitype.NewEvent {
	events := make([]apitype.NewEvent, 0, len(errs))
	for _, e := range errs {
		body := apitype.SessionErrorBody{
			Type:        cmp.Or(e.ErrorType, apitype.SessionErrUnknown),
			Message:     e.Error(),
			RetryStatus: apitype.RetryStatus{Type: "retrying"},
		}
		if e.URL != "" {
			body.RepositoryURL = &e.URL
		}
		events = append(events, mustEvent(apitype.EventSessionError, apitype.SessionError{Error: body}))
	}
	return events
}

// errInterrupted cancels a model call or a tool when the user interrupts.
var errInterrupted = errors.New("harness: interrupted by the user")

// errWatchDone ends an interrupt watch whose operation finished.
var errWatchDone = errors.New("harness: operation finished")

// watchInterrupts returns a context for a model call, a tool or a backoff that is cancelled as soon as a
// user.interrupt arrives, and a function that ends the watch and reports whether it fired. Other client events
// arriving meanwhile just queue.
func (r *run) watchInterrupts() (context.Context, func() bool) {
	ctx, cancel := context.WithCancelCause(r.ctx)
	after := r.seenSeq
	var wg sync.WaitGroup
	wg.Go(func() {
		wake, unsubscribe := r.b.cfg.Store.Subscribe(r.sess.ID)
		defer unsubscribe()
		tick := time.NewTicker(r.b.cfg.PollInterval)
		defer tick.Stop()
		for {
			evs, err := r.b.cfg.Store.EventList(ctx, &store.EventListParams{
				SessionID: r.sess.ID, AfterSeq: after, Types: []string{apitype.EventUserInterrupt}, Limit: eventPage,
			})
			if err == nil && slices.ContainsFunc(evs, func(e apitype.Event) bool { return e.ProcessedAt == nil }) {
				cancel(errInterrupted)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-wake:
			case <-tick.C:
			}
		}
	})
	return ctx, func() bool {
		cancel(errWatchDone)
		wg.Wait()
		return errors.Is(context.Cause(ctx), errInterrupted)
	}
}

// Event builders.

func mustEvent(typ string, payload any) apitype.NewEvent {
	ev, err := apitype.MakeEvent(typ, payload)
	if err != nil {
		panic(err) // every payload here is a struct of this package's choosing: it always encodes
	}
	return ev
}

func toolResult(toolUseID string, isErr bool, text string) apitype.NewEvent {
	return mustEvent(apitype.EventAgentToolResult, apitype.AgentToolResult{
		ToolUseID: toolUseID, IsError: isErr, Content: []apitype.ContentBlock{apitype.TextBlock(text)},
	})
}

func spanEnd(startID string, isErr bool, u apitype.SpanUsage) apitype.NewEvent {
	return mustEvent(apitype.EventSpanModelRequestEnd, apitype.SpanModelRequestEnd{
		ModelRequestStartID: startID, IsError: isErr, ModelUsage: u,
	})
}

func idleEvent(reason apitype.StopReason) apitype.NewEvent {
	p := apitype.SessionIdle{StopReason: reason, StopDetails: json.RawMessage("null")}
	if reason.Type == apitype.StopRefusal {
		p.StopDetails = json.RawMessage(`{"type":"refusal","category":null,"explanation":null}`)
	}
	return mustEvent(apitype.EventSessionStatusIdle, p)
}
