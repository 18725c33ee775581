package harness

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/store"
)

// Multi-agent sessions. A session whose agent has a multiagent roster runs several threads over its one log: the
// primary (the coordinator, whose events are the log's thread "") and the children it starts with start_thread.
// Each thread is a brain's context of its own: its tail holds only its own events (store.ScopeThread), its
// model, prompt, tools, MCP servers and skills are its agent's, and it takes the same steps as a single-agent
// session's one thread. They share the session's lease, sandbox, workspace, vault credentials and usage.
//
// One brain holds all of a session's threads, under the session's one lease: every append of every thread is
// fenced by it, so a crash hands the whole session to the next brain, which resumes each thread from its own
// events (their tool calls closed as of unknown outcome, as always), and no two brains ever run threads of one
// session at once. Claiming threads apart would need a lease per thread and cross-brain hand-offs of the messages
// between them, for no gain here: a session's threads share one sandbox on one machine anyway.
//
// Statuses: a thread's steps write session status events as in a single-agent session; translate makes them the
// thread's own (session.thread_status_*, on the thread's stream, a child's cross-posted to the session's), and
// adds the session's status events when the aggregate changes: running while any thread runs; idle when none
// does, with requires_action listing every thread's blocked calls, else the primary's stop reason.
//
// A child's turn that ends sends its last agent.message to its parent by itself (agent.thread_message_sent on the
// child, agent.thread_message_received on the parent, an input of the parent's next model request), in the
// append that idles the child: a parent never polls, and a child that failed says so.

// maxRunningThreads is the most threads of a session that run at once, the primary included; maxThreads the most
// a session has over its life (a bound on what a run holds of them).
const (
	maxRunningThreads = 25
	maxThreads        = 1000
)

// msgChildInterrupted closes the calls of a child thread the user interrupted.
const msgChildInterrupted = "Tool execution was interrupted before completion. Please retry."

// multiRun is the state of a multi-agent run that its threads share.
type multiRun struct {
	// mu guards what follows, the threads' records and scheduling, and the session's usage; it is held across a
	// thread's append, so that the session's aggregate status events follow the threads' in order.
	mu      sync.Mutex
	threads []*thread // the primary first, then the children by creation
	// status and reason are the session's aggregate status as last appended (reason: its idle stop reason).
	status string
	reason apitype.StopReason

	// changed: a thread's status changed in this run; until then the session's stored status stands.
	changed bool
	// ended: the session terminated (it was archived): no thread runs anything more.
	ended atomic.Bool

	busy int // threads whose goroutine is working
	wg   sync.WaitGroup
	done chan struct{} // closed when no thread is busy: the run is over
	over bool
	err  error // the first error a thread's step returned
}

// threadSched is a thread's scheduling state in a multi-agent run (under multiRun.mu).
type threadSched struct {
	active bool // its goroutine is working
	again  bool // kicked while active: step once more before resting
	// stop is the stop reason of the thread's last idle; lastMessage the content of its last agent.message this
	// turn, and lastError the message of its last session.error: what it reports to its parent (report).
	stop        apitype.StopReason
	lastMessage []apitype.ContentBlock
	lastError   string
	usage       apitype.SessionUsage
	// handsFailed is the reason the sandbox failed a tool call of the thread's turn ("" if it did not).
	handsFailed string
	// interrupted: the thread's next idle ends a turn the user interrupted, which it does not report.
	interrupted bool
	runningFrom time.Time
}

// locked runs fn under the multi-agent run's lock (a single-agent run has one thread: no lock).
func (t *thread) locked(fn func()) {
	if t.rec != nil {
		t.multi.mu.Lock()
		defer t.multi.mu.Unlock()
	}
	fn()
}

// child reports whether the thread is a child (not the primary) of a multi-agent session.
func (t *thread) child() bool { return t.id != "" }

// name is the thread's agent's name, as the thread events give it.
func (t *thread) name() string { return t.agent.Name }

// loadThreads reads a multi-agent session's threads: the primary's tail now, the children's when they first
// step.
func (r *run) loadThreads() error {
	var recs []apitype.SessionThread
	p := &store.ThreadListParams{SessionID: r.sess.ID, Limit: 100}
	for {
		page, err := r.b.cfg.Store.ThreadList(r.ctx, p)
		if err != nil {
			return fmt.Errorf("threads of %s: %w", r.sess.ID, err)
		}
		recs = append(recs, page...)
		if len(page) < p.Limit {
			break
		}
		last := page[len(page)-1]
		p.After = &store.Cursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	r.multi.threads = []*thread{r.main}
	for i := range recs {
		rec := &recs[i]
		if rec.Primary() {
			r.main.rec = rec
			continue
		}
		agent := rec.Agent
		t := r.newThread(rec.ID, rec, r.main, &agent)
		r.multi.threads = append(r.multi.threads, t)
	}
	if r.main.rec == nil {
		return fmt.Errorf("multi-agent session %s has no primary thread", r.sess.ID)
	}
	for _, t := range r.multi.threads {
		if t.rec.Usage != nil {
			t.sched.usage = *t.rec.Usage
		}
		t.tools = t.resolveTools()
	}
	r.multi.status = r.sess.Status
	if err := r.main.loadTail(); err != nil {
		return err
	}
	// A child in the middle of a turn is a takeover too, the primary idle or not (it waits for its children): the
	// tail of each child whose record says it works is read now, and one that is mid-turn makes the run say it
	// resumed the session (recovered) and count its active time from now. The other children's tails are read
	// when they first step.
	for _, t := range r.multi.threads[1:] {
		if t.rec.ArchivedAt != nil || (t.rec.Status != apitype.StatusRunning && t.rec.Status != apitype.StatusRescheduling) {
			continue
		}
		if err := t.loadTail(); err != nil {
			return err
		}
		if st, err := t.derive(); err == nil && st.running() {
			r.tookOver()
		}
	}
	for _, e := range slices.Backward(r.main.tail.events) {
		if e.Type == apitype.EventSessionStatusIdle {
			var idle apitype.SessionIdle
			if e.DecodeData(&idle) == nil {
				r.multi.reason = idle.StopReason
			}
			break
		}
	}
	return r.loadStops()
}

// loadStops gives the threads the stop reasons the session's last idle implies, for the aggregate of a run that
// has not read every thread's events: the calls it names wait in the threads that made them; otherwise its
// reason is the primary's.
func (r *run) loadStops() error {
	reason := r.multi.reason
	if reason.Type != apitype.StopRequiresAction {
		r.main.sched.stop = reason
		return nil
	}
	for _, id := range reason.EventIDs {
		e, err := r.b.cfg.Store.EventGet(r.ctx, r.sess.ID, id)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("call %s of %s: %w", id, r.sess.ID, err)
		}
		if t := r.thread(e.Thread); t != nil {
			t.sched.stop.Type = apitype.StopRequiresAction
			t.sched.stop.EventIDs = append(t.sched.stop.EventIDs, id)
		}
	}
	return nil
}

// thread finds a thread of the run by its record's id ("" and the primary's sthr_ id both name the primary).
func (r *run) thread(id string) *thread {
	for _, t := range r.multi.threads {
		if t.id == id || (t.rec != nil && t.rec.ID == id) {
			return t
		}
	}
	return nil
}

// loopThreads works every thread that has something to do, each on a goroutine of its own, until none has.
func (r *run) loopThreads() error {
	r.multi.done = make(chan struct{})
	after := r.main.tail.lastSeq // read before the primary's goroutine works its tail
	r.multi.mu.Lock()
	r.multi.busy = 1 // the loop's own token, so that no thread that rests at once ends the run before the others start
	for _, t := range r.multi.threads {
		if t.rec.ArchivedAt == nil {
			r.kickLocked(t)
		}
	}
	r.rest()
	r.multi.mu.Unlock()
	watch := make(chan struct{})
	go func() {
		defer close(watch)
		r.watchInputs(after)
	}()
	select {
	case <-r.multi.done:
	case <-r.ctx.Done():
		r.multi.mu.Lock()
		r.multi.over = true
		r.multi.mu.Unlock()
	}
	r.multi.wg.Wait()
	<-watch
	if r.ctx.Err() != nil {
		return r.stopped()
	}
	return r.multi.err
}

// kick makes the thread step until it has nothing left to do: it starts its goroutine, or makes a working one
// look again.
func (r *run) kick(t *thread) {
	r.multi.mu.Lock()
	defer r.multi.mu.Unlock()
	r.kickLocked(t)
}

func (r *run) kickLocked(t *thread) {
	switch {
	case r.multi.over:
	case t.sched.active:
		t.sched.again = true
	default:
		t.sched.active = true
		r.multi.busy++
		r.multi.wg.Go(func() { r.drive(t) })
	}
}

// drive steps a thread until it has nothing left to do (or the run is over), then rests it; the last thread to
// rest ends the run. A step that fails ends the run: the other threads stop after their current step.
func (r *run) drive(t *thread) {
	for {
		acted, err := true, error(nil)
		if t.tail == nil {
			err = t.loadTail()
		} else {
			acted, err = t.step()
		}
		r.multi.mu.Lock()
		if err != nil && r.multi.err == nil && r.ctx.Err() == nil {
			r.multi.err = fmt.Errorf("thread %s: %w", t.name(), err)
			r.multi.over = true
		}
		if err == nil && !r.multi.over && r.ctx.Err() == nil && (acted || t.sched.again) {
			t.sched.again = false
			r.multi.mu.Unlock()
			continue
		}
		t.sched.active, t.sched.again = false, false
		if !r.multi.over && r.ctx.Err() == nil {
			if err := r.settleStatus(); err != nil && r.multi.err == nil {
				r.multi.err = fmt.Errorf("session status: %w", err)
				r.multi.over = true
			}
		}
		if t.child() {
			// A resting child holds no tail: a run's memory grows with the threads at work, not with every
			// thread the session ever started. Its next kick reads it again.
			t.tail = nil
		}
		r.rest()
		r.multi.mu.Unlock()
		return
	}
}

// settleStatus appends the session's status when the aggregate of its threads' changed with no thread's append to
// carry it: the last thread to rest after others' appends idles the session (under multiRun.mu).
func (r *run) settleStatus() error {
	if !r.multi.changed {
		return nil
	}
	status, reason := r.aggregate(nil, nil)
	if status == r.multi.status && (status != apitype.StatusIdle || sameReason(reason, r.multi.reason)) {
		return nil
	}
	p := &store.EventAppendParams{Events: []apitype.NewEvent{sessionStatusEvent(status, reason)}, Status: status}
	if status == apitype.StatusIdle && !r.activeFrom.IsZero() {
		p.ActiveSeconds = time.Since(r.activeFrom).Seconds()
	}
	if _, err := r.appendRaw(p); err != nil {
		return err
	}
	r.multi.status, r.multi.reason = status, reason
	if status == apitype.StatusIdle {
		r.activeDone += p.ActiveSeconds
		r.activeFrom = time.Time{}
	}
	r.b.cfg.Metrics.Status(status)
	return nil
}

// rest takes a busy token back (under multiRun.mu); the last ends the run.
func (r *run) rest() {
	r.multi.busy--
	if r.multi.busy == 0 {
		r.multi.over = true
		close(r.multi.done)
	}
}

// watchInputs kicks the thread of each input that arrives while the run works (a client's answer to a child's
// call, an interrupt, a message to the primary), until the run is over.
func (r *run) watchInputs(after int64) {
	wake, unsubscribe := r.b.cfg.Store.Subscribe(r.sess.ID)
	defer unsubscribe()
	tick := time.NewTicker(r.b.cfg.PollInterval)
	defer tick.Stop()
	types := []apitype.EventType{apitype.EventUserMessage, apitype.EventUserInterrupt, apitype.EventUserToolConfirmation,
		apitype.EventUserCustomToolResult, apitype.EventUserToolResult, apitype.EventUserDefineOutcome, apitype.EventSystemMessage,
		apitype.EventAgentThreadMessageReceived, apitype.EventSessionStatusTerminated}
	for {
		select {
		case <-r.multi.done:
			return
		case <-r.ctx.Done():
			return
		case <-wake:
		case <-tick.C:
		}
		evs, err := r.b.cfg.Store.EventList(r.ctx, &store.EventListParams{
			SessionID: r.sess.ID, Scope: store.ScopeAll, AfterSeq: after, Types: types, Limit: eventPage,
		})
		if err != nil {
			continue
		}
		r.multi.mu.Lock()
		for _, e := range evs {
			after = e.Seq
			if e.Type == apitype.EventSessionStatusTerminated && e.Thread == "" {
				r.multi.ended.Store(true)
				for _, t := range r.multi.threads {
					r.kickLocked(t)
				}
				continue
			}
			if e.ProcessedAt != nil {
				continue
			}
			if t := r.thread(e.Thread); t != nil {
				r.kickLocked(t)
			}
		}
		r.multi.mu.Unlock()
	}
}

// translate makes a multi-agent thread's append its own (under multiRun.mu): its events are the thread's, its
// status events the thread's status events, its record follows, a child's end of turn is reported to its parent,
// and the session's status follows the aggregate of its threads'. It returns the threads to kick once the
// append is done.
func (t *thread) translate(p *store.EventAppendParams) []*thread {
	now := apitype.Now()
	if p.Status == apitype.StatusIdle && t.inputWaiting(p) {
		// The turn ends with a message waiting (another thread's, sent meanwhile): the thread goes on to it
		// instead of idling, so that neither it nor the session idles in between.
		p.Events = slices.DeleteFunc(p.Events, func(e apitype.NewEvent) bool { return e.Type == apitype.EventSessionStatusIdle })
		p.Status = ""
		t.sched.again = true
	}
	evs := make([]apitype.NewEvent, 0, len(p.Events)+4)
	var kicks []*thread
	threadStatus := p.Status
	// The threads this append gives a message: they will run on it, whatever their status now.
	waking := map[string]bool{}
	for _, e := range p.Events {
		if e.Thread != "" || e.Type == apitype.EventAgentThreadMessageReceived {
			evs = append(evs, e) // already addressed (a message to another thread)
			waking[e.Thread] = true
			continue
		}
		switch e.Type {
		case apitype.EventAgentMessage:
			var m apitype.AgentMessage
			if json.Unmarshal(e.Data, &m) == nil {
				t.sched.lastMessage = m.Content
			}
		case apitype.EventSessionError:
			var se apitype.SessionError
			if json.Unmarshal(e.Data, &se) == nil {
				t.sched.lastError = se.Error.Message
			}
		case apitype.EventAgentToolResult:
			var r apitype.AgentToolResult
			if json.Unmarshal(e.Data, &r) == nil && r.IsError && r.Source != nil && r.Source.Component == apitype.ComponentHands &&
				r.Source.Reason != apitype.ReasonTimeout { // a command's own timeout is not the sandbox's failure
				t.sched.handsFailed = string(r.Source.Reason)
			}
		}
		if ts, ok := sessionToThreadStatus[e.Type]; ok {
			payload := apitype.ThreadStatus{SessionThreadID: t.rec.ID, AgentName: t.name()}
			if e.Type == apitype.EventSessionStatusIdle {
				var idle apitype.SessionIdle
				_ = json.Unmarshal(e.Data, &idle) // written by idleEvent
				payload.StopReason, payload.StopDetails = &idle.StopReason, idle.StopDetails
				t.sched.stop = idle.StopReason
				if t.child() && idle.StopReason.Type != apitype.StopRequiresAction && !t.sched.interrupted {
					if report, to := t.report(idle.StopReason); to != nil {
						evs = append(evs, report...)
						kicks = append(kicks, to)
						waking[to.id] = true
					}
				}
			}
			if e.Type == apitype.EventSessionStatusRunning {
				t.sched.lastMessage, t.sched.lastError, t.sched.handsFailed = nil, "", ""
			}
			t.sched.interrupted = false
			e = mustEvent(ts, payload)
		}
		e.Thread = t.id
		if t.child() && crossPosted(e, t.builtin()) {
			e.CrossPost = true
			if !threadStatusEvent(e.Type) {
				e.Data = apitype.WithField(e.Data, "session_thread_id", t.rec.ID)
			}
		}
		evs = append(evs, e)
	}
	p.Events = evs
	p.Release = false // the run ends when every thread is done (loopThreads), not with one thread's turn
	if threadStatus != "" || p.Usage != nil {
		if threadStatus != "" {
			t.setStatus(threadStatus, now)
			t.multi.changed = true
		}
		t.rec.UpdatedAt = now
		rec := *t.rec
		u := t.sched.usage
		rec.Usage = &u
		p.Threads = append(p.Threads, rec)
	}
	p.Status = ""
	if status, reason := t.aggregate(t, waking); status != t.multi.status || (status == apitype.StatusIdle && !sameReason(reason, t.multi.reason)) {
		p.Status = status
		t.multi.status, t.multi.reason = status, reason
		p.Events = append(p.Events, sessionStatusEvent(status, reason))
	}
	return kicks
}

// inputWaiting reports whether a turn that ends with append p (under multiRun.mu, which every append of another
// thread holds) leaves an input of the thread unprocessed: a message another thread sent it since its last read,
// or one its tail holds that p does not pick up. Only a turn that ends of itself (end_turn) goes on.
func (t *thread) inputWaiting(p *store.EventAppendParams) bool {
	for _, e := range p.Events {
		if e.Type == apitype.EventSessionStatusIdle {
			var idle apitype.SessionIdle
			if json.Unmarshal(e.Data, &idle) != nil || idle.StopReason.Type != apitype.StopEndTurn {
				return false
			}
		}
	}
	for _, e := range t.tail.events {
		if isInput(e.Type) && e.ProcessedAt == nil && !slices.Contains(p.MarkProcessed, e.Seq) &&
			e.Type != apitype.EventUserInterrupt {
			return true
		}
	}
	evs, err := t.b.cfg.Store.EventList(t.ctx, &store.EventListParams{SessionID: t.sess.ID, Scope: store.ScopeThread, Thread: t.id,
		AfterSeq: t.tail.lastSeq, Types: []apitype.EventType{apitype.EventAgentThreadMessageReceived, apitype.EventUserMessage}, Limit: 1})
	return err == nil && len(evs) > 0
}

// setStatus records a thread's new status and its timings.
func (t *thread) setStatus(status string, now time.Time) {
	prev := t.rec.Status
	t.rec.Status = status
	st := t.rec.Stats
	if st == nil {
		st = &apitype.ThreadStats{}
		if status == apitype.StatusRunning {
			st.StartupSeconds = now.Sub(t.rec.CreatedAt).Seconds()
		}
	}
	running := func(s string) bool { return s == apitype.StatusRunning || s == apitype.StatusRescheduling }
	switch {
	case running(status) && !running(prev):
		t.sched.runningFrom = now
	case !running(status) && running(prev) && !t.sched.runningFrom.IsZero():
		st.ActiveSeconds += now.Sub(t.sched.runningFrom).Seconds()
		t.sched.runningFrom = time.Time{}
	}
	st.DurationSeconds = now.Sub(t.rec.CreatedAt).Seconds()
	t.rec.Stats = st
}

// sessionToThreadStatus maps the session status events a thread's steps write to the thread's own.
var sessionToThreadStatus = map[apitype.EventType]apitype.EventType{
	apitype.EventSessionStatusRunning:     apitype.EventSessionThreadStatusRunning,
	apitype.EventSessionStatusIdle:        apitype.EventSessionThreadStatusIdle,
	apitype.EventSessionStatusRescheduled: apitype.EventSessionThreadStatusRescheduled,
	apitype.EventSessionStatusTerminated:  apitype.EventSessionThreadStatusTerminated,
}

func threadStatusEvent(typ apitype.EventType) bool {
	_, ok := threadStatuses[typ]
	return ok
}

// crossPosted reports whether a child's event shows on the session's stream too: its status changes, the
// session's usage after its model requests, and the calls that wait for the client (a custom tool's, one that
// asks for confirmation, a self-hosted worker's).
func crossPosted(e apitype.NewEvent, builtin execKind) bool {
	switch e.Type {
	case apitype.EventSessionThreadStatusRunning, apitype.EventSessionThreadStatusIdle,
		apitype.EventSessionThreadStatusRescheduled, apitype.EventSessionThreadStatusTerminated,
		apitype.EventAgentCustomToolUse, apitype.EventSessionUsage:
		return true
	case apitype.EventAgentToolUse, apitype.EventAgentMCPToolUse:
		var u apitype.AgentToolUse
		if json.Unmarshal(e.Data, &u) != nil {
			return false
		}
		return u.EvaluatedPermission == apitype.PermissionAsk ||
			(e.Type == apitype.EventAgentToolUse && builtin == execWork && u.EvaluatedPermission == apitype.PermissionAllow)
	}
	return false
}

// aggregate is the session's status given its threads' (under multiRun.mu): terminated with the primary, running
// while any thread runs or may be about to (waking: it was just sent a message; or, the session running, its
// goroutine is at work, self's aside: the last to rest settles the session's status, settleStatus), else idle,
// with requires_action listing the calls every thread waits on, else the primary's stop reason. A goroutine at
// work keeps the session running, never makes it run: only a thread's own running does.
func (r *run) aggregate(self *thread, waking map[string]bool) (string, apitype.StopReason) {
	if r.main.rec.Status == apitype.StatusTerminated {
		return apitype.StatusTerminated, apitype.StopReason{}
	}
	holding := r.multi.status == apitype.StatusRunning || r.multi.status == apitype.StatusRescheduling
	var ids []string
	for _, th := range r.multi.threads {
		switch {
		case th.rec.ArchivedAt != nil:
		case th.rec.Status == apitype.StatusRunning || th.rec.Status == apitype.StatusRescheduling || waking[th.id] ||
			(holding && th != self && th.sched.active):
			return apitype.StatusRunning, apitype.StopReason{}
		case th.rec.Status == apitype.StatusIdle && th.sched.stop.Type == apitype.StopRequiresAction:
			ids = append(ids, th.sched.stop.EventIDs...)
		}
	}
	if len(ids) > 0 {
		return apitype.StatusIdle, apitype.StopReason{Type: apitype.StopRequiresAction, EventIDs: ids}
	}
	reason := r.main.sched.stop
	if reason.Type == "" || reason.Type == apitype.StopRequiresAction {
		reason = apitype.StopReason{Type: apitype.StopEndTurn}
	}
	return apitype.StatusIdle, reason
}

func sameReason(a, b apitype.StopReason) bool {
	return a.Type == b.Type && slices.Equal(a.EventIDs, b.EventIDs)
}

// sessionStatusEvent is the session's status event for an aggregate status.
func sessionStatusEvent(status string, reason apitype.StopReason) apitype.NewEvent {
	switch status {
	case apitype.StatusIdle:
		return idleEvent(reason)
	case apitype.StatusTerminated:
		return mustEvent(apitype.EventSessionStatusTerminated, nil)
	case apitype.StatusRescheduling:
		return mustEvent(apitype.EventSessionStatusRescheduled, nil)
	}
	return mustEvent(apitype.EventSessionStatusRunning, nil)
}

// fanOut is the children an interrupt of the primary thread reaches: with no session_thread_id it interrupts
// every thread, so each child that runs or waits on the client gets one of its own.
func (t *thread) fanOut(ints []apitype.Event) []*thread {
	if t.roster == nil || t.child() {
		return nil
	}
	all := false
	for _, e := range ints {
		var in apitype.UserInterrupt
		all = all || (e.DecodeData(&in) == nil && in.SessionThreadID == "")
	}
	if !all {
		return nil
	}
	t.multi.mu.Lock()
	defer t.multi.mu.Unlock()
	var out []*thread
	for _, c := range t.multi.threads[1:] {
		if c.rec.ArchivedAt == nil && (c.rec.Status == apitype.StatusRunning || c.rec.Status == apitype.StatusRescheduling ||
			(c.rec.Status == apitype.StatusIdle && c.sched.stop.Type == apitype.StopRequiresAction)) {
			out = append(out, c)
		}
	}
	return out
}

// report is what a child whose turn ended tells its parent: its last message, or why it stopped without one.
func (t *thread) report(stop apitype.StopReason) ([]apitype.NewEvent, *thread) {
	to := t.parent
	if to == nil {
		to = t.main
	}
	var text string
	switch stop.Type {
	case apitype.StopRetriesExhausted:
		text = "The thread failed: its model requests failed and retries are exhausted"
		if t.sched.lastError != "" {
			text += " (" + t.sched.lastError + ")"
		}
		text += ". You may send it a message to try again, or go on without it."
	case apitype.StopBudgetReached:
		text = "The thread paused: the session's budget is reached."
	case apitype.StopRefusal:
		text = "The thread's model refused to continue."
	}
	content := t.sched.lastMessage
	if text != "" || len(content) == 0 {
		if text == "" {
			text = "(The thread ended its turn without a message.)"
		}
		content = []apitype.ContentBlock{apitype.TextBlock(text)}
	}
	if t.sched.handsFailed != "" {
		// The sandbox failed under the thread (each call after got a fresh one): the parent should know that the
		// thread's work may be partial.
		note := "[The sandbox failed while this thread worked (" + t.sched.handsFailed + "): a tool call's outcome was " +
			"lost and the calls after it ran in a fresh sandbox; check its work.]"
		content = append([]apitype.ContentBlock{apitype.TextBlock(note)}, content...)
	}
	return t.messageTo(to, content), to
}

// messageTo is a message from t to another thread of its session: agent.thread_message_sent on t, and
// agent.thread_message_received on to, an input of to's next model request.
func (t *thread) messageTo(to *thread, content []apitype.ContentBlock) []apitype.NewEvent {
	sent := apitype.ThreadMessageSent{ToSessionThreadID: to.rec.ID, Content: content}
	if to.child() {
		sent.ToAgentName = new(to.name())
	}
	recv := apitype.ThreadMessageReceived{FromSessionThreadID: t.rec.ID, Content: content}
	if t.child() {
		recv.FromAgentName = new(t.name())
	}
	s := mustEvent(apitype.EventAgentThreadMessageSent, sent)
	s.Thread = t.id
	r := mustEvent(apitype.EventAgentThreadMessageReceived, recv)
	r.Thread, r.Processed = to.id, false
	return []apitype.NewEvent{s, r}
}

// receivedBlocks is a message from another thread as its receiver's model sees it: who sent it, then what.
func receivedBlocks(m apitype.ThreadMessageReceived) []model.Block {
	from := "the coordinator (your parent thread)"
	if m.FromAgentName != nil {
		from = fmt.Sprintf("thread %s (agent %q)", m.FromSessionThreadID, *m.FromAgentName)
	}
	return append([]model.Block{{Type: model.BlockText, Text: "[Message from " + from + "]"}}, messageBlocks(m.Content)...)
}

// threadsNote tells a thread's model how to work with the others (the system prompt's last part).
func (t *thread) threadsNote() string {
	if t.roster == nil {
		return ""
	}
	if t.child() {
		return "You are a thread started by a coordinator agent, working in parallel with others on a shared " +
			"filesystem (not a shared shell). When you end your turn, your last message goes to the coordinator: " +
			"make it your result. To tell the coordinator something before that, call send_thread_message."
	}
	var b strings.Builder
	b.WriteString("You coordinate other agents. start_thread starts one on a task; it works in parallel with you " +
		"and shares your filesystem (not your shell). Its last message of each turn comes back to you as a message, " +
		"so never poll: end your turn to wait for it. send_thread_message gives a running or idle thread more work.")
	if len(t.roster.Agents) > 0 || t.roster.Self {
		b.WriteString(" Agents you can start:")
		for _, a := range t.roster.Agents {
			if a.ID == t.sess.Agent.ID {
				continue
			}
			b.WriteString("\n- " + a.Name)
			if a.Description != "" {
				b.WriteString(": " + a.Description)
			}
		}
		if t.roster.Self {
			b.WriteString("\n- self: another instance of you")
		}
	}
	if t.roster.Inline {
		b.WriteString("\nYou may also define an agent inline: give agent as an object with name, and optionally " +
			"description, system, model and tools.")
	}
	return b.String()
}
