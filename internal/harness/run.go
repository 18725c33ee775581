package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
	"go.opentelemetry.io/otel/trace"
)

// run is one brain's work on one claimed session: everything it knows it has read from the log. What belongs to
// the session (its lease, its record and environment, the run's trace span) is the run's; what belongs to one
// context of the conversation is its thread's.
type run struct {
	b      *Brain
	lease  *leaseHolder
	ctx    context.Context // cancelled when the lease is lost or the brain stops
	cancel context.CancelCauseFunc

	// released: an append released the lease (the turn's last); the run writes nothing more.
	released bool

	// span is the run's trace span (invoke_agent), spanCtx carries it: model requests and tool calls are its
	// children.
	span    trace.Span
	spanCtx context.Context

	sess *apitype.Session
	env  apitype.EnvConfig
	// activeFrom is when this run last saw the session start working (zero while idle): the time until it idles
	// again is added to the session's active seconds.
	activeFrom time.Time
	// activeDone is the active time this run has already added to the session's stats.
	activeDone float64
	// takeover: the claim found a turn in progress (another brain left it mid-way).
	takeover bool

	// usage is the session's usage, every thread's model requests counted (mu guards it in a multi-agent run).
	usage apitype.SessionUsage
	// budget is the session's budget as the primary thread's last step derived it (budget.go), for the
	// session.usage events.
	budget json.RawMessage

	// main is the session's primary thread: the one context of a single-agent session's conversation.
	main *thread
	// roster is what a multi-agent session's threads may start (nil: a single-agent session); the rest of the
	// multi-agent state is in threads.go.
	roster *apitype.Roster
	multi  multiRun
}

// thread is one context of a session's conversation: the tail of the log it works from, the agent whose model,
// prompt and tools it runs, the lead of its next append, and the calls it has yet to run. The run's loop works
// on a thread; a thread reaches the session, its lease and the brain through the run it embeds.
type thread struct {
	*run
	// id is the thread's key in the log: "" for the primary thread, a child's sthr_ id otherwise. rec is its
	// record in a multi-agent session (nil in a single-agent one).
	id  string
	rec *apitype.SessionThread
	// agent is the thread's agent: the session's for the primary thread.
	agent  *apitype.ThreadAgent
	parent *thread
	tail   *tail
	tools  *toolset
	// lead is what the next append carries ahead of its own events (see modelTurn).
	lead *lead
	// outcome is the session's active outcome as the last step derived it (outcome.go; the primary thread's).
	outcome *outcome
	// skillNote is the system prompt's note on the agent's skills, read once per run.
	skillNote *string
	// fresh holds the tool uses this thread appended or saw confirmed, and has not run yet. Any other approved tool
	// use without a result was cut short by a crash.
	fresh map[string]bool
	// mcpDown holds the MCP servers whose listing failed in this run, reported once (mcp.go).
	mcpDown map[string]bool
	// seenSeq is the last sequence number the current state was derived from: a client event after it may not
	// have been acted on yet.
	seenSeq int64
	// sched is the thread's place in a multi-agent run's scheduling (threads.go).
	sched threadSched
}

// newThread is a thread of the run working for agent: the primary (id "") or a child.
func (r *run) newThread(id string, rec *apitype.SessionThread, parent *thread, agent *apitype.ThreadAgent) *thread {
	t := &thread{run: r, id: id, rec: rec, parent: parent, agent: agent, fresh: map[string]bool{}}
	t.tools = t.resolveTools()
	return t
}

// loop works the session until nothing is left to do, or the work is cancelled.
func (r *run) loop() error {
	if err := r.load(); err != nil {
		return err
	}
	r.follow(nil)
	if err := r.recovered(); err != nil {
		return err
	}
	if r.roster != nil {
		return r.loopThreads()
	}
	for {
		if r.ctx.Err() != nil {
			return r.stopped()
		}
		acted, err := r.main.step()
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
	if errors.Is(context.Cause(r.ctx), errLeaseLost) || r.main == nil || r.main.tail == nil {
		return nil
	}
	if r.roster != nil {
		if r.multi.status != apitype.StatusRunning && r.multi.status != apitype.StatusRescheduling {
			return nil
		}
	} else if st, err := r.main.derive(); err != nil || !st.running() {
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
	r.sess = sess
	// A session with no environment (a dream's: the server's own) or whose environment was deleted runs in a
	// cloud sandbox without network: nothing declared it any.
	r.env = apitype.EnvConfig{Type: apitype.EnvironmentCloud,
		Networking: &apitype.Networking{Type: apitype.NetworkingLimited, AllowedHosts: []string{}}}
	if sess.EnvironmentID != "" {
		env, err := r.b.cfg.Store.EnvironmentGet(r.ctx, sess.EnvironmentID)
		switch {
		case err == nil:
			r.env = env.Config
		case !errors.Is(err, store.ErrNotFound):
			return fmt.Errorf("get environment %s: %w", sess.EnvironmentID, err)
		}
	}
	r.usage, r.budget = sess.Usage, sess.Budget
	if r.roster, err = apitype.ParseRoster(sess.Agent.Multiagent, sess.Agent.ID); err != nil {
		return fmt.Errorf("session %s: %w", id, err)
	}
	a := sess.Agent
	r.main = r.newThread("", nil, nil, &apitype.ThreadAgent{Type: apitype.ThreadAgentAgent, ID: a.ID, Version: a.Version, Name: a.Name,
		Description: a.Description, System: a.System, Model: a.Model, Tools: a.Tools, MCPServers: a.MCPServers, Skills: a.Skills})
	if r.roster != nil {
		return r.loadThreads()
	}
	return r.main.loadTail()
}

// backend names the brain's sandbox backend, for failure attribution ("" when its hands do not say).
func (b *Brain) backend() string {
	if h, ok := b.cfg.Hands.(interface{ Backend() string }); ok {
		return h.Backend()
	}
	return ""
}

// recovered says so, in the log and the trace, when this run took over a turn another brain left mid-way (it
// crashed, or stalled and lost its lease): a session.error from the brain, crash_recovered, retrying. A turn a
// stopping brain handed back (its last event a session.status_rescheduled) resumes as planned and says nothing.
func (r *run) recovered() error {
	if !r.takeover {
		return nil
	}
	src := source(apitype.ComponentBrain, "", apitype.ReasonCrashRecovered)
	r.recoverSpan(src)
	if n := len(r.main.tail.events); n > 0 && r.main.tail.events[n-1].Type == apitype.EventSessionStatusRescheduled {
		return nil
	}
	r.b.cfg.Logger.Info("resuming a turn another brain left mid-way", "session", r.sess.ID)
	_, err := r.main.append("", nil, mustEvent(apitype.EventSessionError, apitype.SessionError{Error: apitype.SessionErrorBody{
		Type: apitype.SessionErrUnknown,
		Message: "The brain working this turn stopped before it finished (it crashed, or stalled and lost its lease); " +
			"this brain resumed the turn from the log. A tool call it left without a result gets one saying its outcome is unknown.",
		RetryStatus: apitype.RetryStatus{Type: apitype.RetryStatusRetrying},
		Source:      src,
	}}))
	return err
}

// builtin is the executor kind of the session's built-in tools: the work queue's in a self_hosted environment
// (the user's worker runs them), the hands' otherwise.
func (r *run) builtin() execKind {
	if r.env.Type == apitype.EnvironmentSelfHosted {
		return execWork
	}
	return execHands
}

// keepTails offers the run's tails to the brain's cache (tailcache.go), once the run is over and has released
// its lease.
func (r *run) keepTails() {
	if r.main == nil {
		return
	}
	threads := []*thread{r.main}
	if r.roster != nil {
		threads = r.multi.threads
	}
	for _, t := range threads {
		r.b.tails.keep(tailKey{r.sess.ID, t.id}, t.tail)
	}
}
