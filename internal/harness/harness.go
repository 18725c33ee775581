// Package harness is the brain: a stateless loop that claims a runnable session, reads its log, calls the model,
// routes tool calls and appends every step to the log before acting on it.
//
// Nothing in a brain has to survive a crash. All it knows it reads from the log; all it does it writes there
// first, fenced by a lease, so a brain that stalls or dies is replaced by another that resumes from the last
// event. A tool call cut short by a crash is never run again silently: the next brain gives it an error result
// saying its outcome is unknown, and the model decides.
//
// The files follow one session's work: harness.go (the Brain: claims and workers) and lease.go (renewal), then
// per claimed session run.go (the run, its thread, and its loop), tail.go (reading the log), tailcache.go (the
// tails of long sessions a brain keeps between its runs on them), state.go (the state derived from the tail, a
// reading per event type), step.go (the table of steps, the first the state calls for taken),
// append.go (fenced appends), turn.go and call.go (a model turn and one model call under the retry policy),
// transcript.go (the model's context, a reading per event type) and compact.go (its compaction), tools.go (tool
// routes), executor.go (the one table of executors: who runs a tool's calls, by kind), and the executors:
// hands.go (built-in tools in the sandbox, and provisioning spans), mcp.go (MCP tools: offered from Config.MCP,
// the MCP proxy, and their calls), selfhosted.go (built-in tools of a self_hosted environment, through the work
// queue) and the client's custom tools (executor.go); outcome.go (outcomes: the grader and its steps), interrupt.go, events.go (event builders, and the readers of
// tool use and result events) and preview.go (stream previews).
//
// A run holds a thread per context of the session's conversation (its tail, agent, tools, lead and calls yet to
// run): one in a single-agent session; in a multi-agent one the primary and the children it starts, each on a
// goroutine of its own over the same log and lease (threads.go), with the thread tools one more executor
// (coordinate.go).
package harness

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/mcp"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/price"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/webfetch"
	"github.com/corralhq/corral/internal/websearch"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Config configures a Brain. Zero fields take the defaults documented on them.
type Config struct {
	Store store.Store
	Model model.Model
	// Hands declares the built-in tools (the model is offered their definitions) and runs them. Nil means no
	// hands: no built-in tool is offered, and a call to one gets an error result. A server whose sandbox backend
	// cannot run passes sandbox.Unavailable instead, so the model is still offered the tools and learns why they
	// fail.
	Hands sandbox.Hands
	// WebFetch fetches pages for the web_fetch tool, in the brain's process under the egress rules (the webfetch
	// port; cmd/ gives httpfetch). Nil: web_fetch is refused as a tool this server does not serve.
	WebFetch webfetch.Fetcher
	// MCP reaches the agents' MCP servers (the MCP proxy, which holds their credentials). Nil: an agent's
	// mcp_toolset offers no tools, and the session gets an mcp_connection_failed_error saying why.
	MCP mcp.Client
	// WebSearch runs the agents' web_search calls (websearch.go): a search provider the operator configured
	// (corral serve --web-search). Nil: web_search is left out of the model's tools, and a call to it gets an
	// error result saying why.
	WebSearch websearch.Searcher
	// WebSearchServer, with WebSearch nil, offers web_search to the models of the default route (Anthropic's:
	// ids without a "<prefix>/") as Anthropic's own server tool, web_search_20250305 (corral serve --web-search
	// anthropic): the provider searches, and its server_tool_use and web_search_tool_result blocks are logged
	// and replayed.
	WebSearchServer bool
	// MCPTimeout bounds one MCP tool listing or call (default DefaultMCPTimeout).
	MCPTimeout time.Duration
	Logger     *slog.Logger // default: discard
	// Owner names this brain in leases (default: hostname, pid and a random suffix).
	Owner string
	// Workers is how many sessions this brain works at once (default DefaultWorkers()).
	Workers int
	// LeaseTTL is how long a claim lasts without renewal (default DefaultLeaseTTL); leases are renewed every
	// LeaseTTL/3.
	LeaseTTL time.Duration
	// PollInterval is how often to look for work and client events when no wake-up arrives (default
	// DefaultPollInterval).
	PollInterval time.Duration
	Retry        RetryPolicy
	// ContextTokens is the model's context window in tokens (default DefaultContextTokens).
	ContextTokens int
	// CompactAt is the fraction of ContextTokens past which the conversation is compacted (default
	// DefaultCompactAt).
	CompactAt float64
	// ModelTimeout bounds one model call, streaming included (default DefaultModelTimeout): a stalled stream is
	// cut and retried like a dropped connection, so it cannot hold a worker and its session forever.
	ModelTimeout time.Duration
	// GraderModel is the model that grades outcomes (outcome.go): "" is the session agent's own model.
	GraderModel string
	// GraderHeartbeat is how often span.outcome_evaluation_ongoing is appended while a grader's request is in
	// flight, after the one that announces it (default DefaultGraderHeartbeat).
	GraderHeartbeat time.Duration
	// MaxTokens caps each model answer (default DefaultMaxTokens).
	MaxTokens int
	// ThinkingBudget enables extended thinking with this many tokens (0 = off). It must be below MaxTokens.
	ThinkingBudget int
	// EagerHands provisions the session's sandbox before its first model call, as a coupled design does; for
	// comparison only (corral bench). It applies when Hands implements sandbox.Provisioner and the agent has
	// built-in tools; the provisioning is logged as usual, and a failure is only logged (the first tool call
	// then retries it, as with lazy hands).
	EagerHands bool
	// PreviewInterval is how often a streaming answer's previews (event_start / event_delta for clients that
	// stream with event_deltas) are published to the store, the deltas in between coalesced (default
	// DefaultPreviewInterval). Negative: publish no previews.
	PreviewInterval time.Duration
	// Prices are the list prices each model request is priced at, for the sessions' usage and budgets (nil:
	// price.Default(), Anthropic's list rates for the Claude models).
	Prices *price.Table
	// Metrics receives the brain's measurements (internal/metrics implements it); nil records nothing.
	Metrics Metrics
	// TailCacheBytes bounds the tails of long sessions the brain keeps between its runs on them (tailcache.go), so
	// that its next run reads only what was appended since (default DefaultTailCacheBytes; negative: none).
	TailCacheBytes int64
	// TracerProvider traces each run of a session (invoke_agent), its model requests (chat, with the GenAI
	// attributes), tool calls (execute_tool) and sandbox provisioning; nil traces nothing.
	TracerProvider trace.TracerProvider
}

// Metrics receives what a brain measures: turns, status changes, model requests, tool calls, sandbox
// provisioning, appends and lease takeovers. Its methods must be cheap and safe for concurrent use.
type Metrics interface {
	Turn()
	Status(status string)
	// ModelRequest: errKind is "" on success (see errorKind).
	ModelRequest(model string, d time.Duration, errKind string, input, output, cacheCreation, cacheRead int64)
	// ToolCall: route is "hands" for built-in tools, "mcp" for MCP tools.
	ToolCall(tool, route string, d time.Duration, isError bool)
	Provisioned(backend string, d time.Duration, err error)
	StoreAppend(d time.Duration, err error)
	// LeaseTakeover: a session claimed with a turn in progress (its brain died or lost the lease mid-turn).
	LeaseTakeover()
	// LeaseLost: this brain's lease on a session was taken over by another.
	LeaseLost()
}

type nopMetrics struct{}

func (nopMetrics) Turn()                                                                  {}
func (nopMetrics) Status(string)                                                          {}
func (nopMetrics) ModelRequest(string, time.Duration, string, int64, int64, int64, int64) {}
func (nopMetrics) ToolCall(string, string, time.Duration, bool)                           {}
func (nopMetrics) Provisioned(string, time.Duration, error)                               {}
func (nopMetrics) StoreAppend(time.Duration, error)                                       {}
func (nopMetrics) LeaseTakeover()                                                         {}
func (nopMetrics) LeaseLost()                                                             {}

// RetryPolicy says how retryable model errors are retried.
type RetryPolicy struct {
	MaxRetries int           // retries after the first attempt (0 = DefaultMaxRetries; negative = none)
	BaseDelay  time.Duration // first backoff (default DefaultRetryBaseDelay); doubled each retry, with jitter
	MaxDelay   time.Duration // cap on one backoff (default DefaultRetryMaxDelay)
}

// The defaults of Config, for the flags of cmd/ to show and use.
const (
	DefaultLeaseTTL      = 5 * time.Second
	DefaultPollInterval  = time.Second
	DefaultContextTokens = 200000
	DefaultCompactAt     = 0.8
	DefaultModelTimeout  = 10 * time.Minute
	// DefaultGraderHeartbeat is how often a grader's request in flight is announced again.
	DefaultGraderHeartbeat = 15 * time.Second
	DefaultMaxTokens       = 8192
	DefaultPreviewInterval = 25 * time.Millisecond
	DefaultTailCacheBytes  = 64 << 20
	DefaultMaxRetries      = 5
	DefaultRetryBaseDelay  = time.Second
	DefaultRetryMaxDelay   = time.Minute
)

// DefaultWorkers is the default of Config.Workers, sized to the machine: a brain mostly waits on the model, so
// a core keeps many sessions going.
func DefaultWorkers() int { return 100 * runtime.NumCPU() }

func (c *Config) setDefaults() {
	if c.Prices == nil {
		c.Prices = price.Default()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Metrics == nil {
		c.Metrics = nopMetrics{}
	}
	if c.TracerProvider == nil {
		c.TracerProvider = noop.NewTracerProvider()
	}
	if c.Owner == "" {
		host, _ := os.Hostname() // an empty host name still gives a unique owner below
		c.Owner = fmt.Sprintf("%s-%d-%s", cmp.Or(host, "brain"), os.Getpid(), apitype.NewID("")[4:12])
	}
	c.Workers = cmp.Or(c.Workers, DefaultWorkers())
	c.LeaseTTL = cmp.Or(c.LeaseTTL, DefaultLeaseTTL)
	c.PollInterval = cmp.Or(c.PollInterval, DefaultPollInterval)
	c.PreviewInterval = cmp.Or(c.PreviewInterval, DefaultPreviewInterval)
	c.Retry.MaxRetries = max(cmp.Or(c.Retry.MaxRetries, DefaultMaxRetries), 0)
	c.Retry.BaseDelay = cmp.Or(c.Retry.BaseDelay, DefaultRetryBaseDelay)
	c.Retry.MaxDelay = cmp.Or(c.Retry.MaxDelay, DefaultRetryMaxDelay)
	c.ContextTokens = cmp.Or(c.ContextTokens, DefaultContextTokens)
	c.CompactAt = cmp.Or(c.CompactAt, DefaultCompactAt)
	c.MaxTokens = cmp.Or(c.MaxTokens, DefaultMaxTokens)
	c.ModelTimeout = cmp.Or(c.ModelTimeout, DefaultModelTimeout)
	c.GraderHeartbeat = cmp.Or(c.GraderHeartbeat, DefaultGraderHeartbeat)
	c.TailCacheBytes = cmp.Or(c.TailCacheBytes, DefaultTailCacheBytes)
}

func (c *Config) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("harness: Config.Store is required")
	case c.Model == nil:
		return errors.New("harness: Config.Model is required")
	case c.Workers < 0:
		return errors.New("harness: Config.Workers must not be negative")
	case c.LeaseTTL < 3*time.Millisecond:
		return errors.New("harness: Config.LeaseTTL is too short")
	case c.CompactAt <= 0 || c.CompactAt > 1:
		return errors.New("harness: Config.CompactAt must be in (0, 1]")
	case c.ThinkingBudget < 0 || (c.ThinkingBudget > 0 && c.ThinkingBudget >= c.MaxTokens):
		return errors.New("harness: Config.ThinkingBudget must be below MaxTokens")
	case c.Retry.BaseDelay < 0 || c.Retry.MaxDelay < c.Retry.BaseDelay:
		return errors.New("harness: Config.Retry is invalid")
	}
	return nil
}

// Brain runs sessions: Workers goroutines each claim a runnable session, work it until its turn is over, and
// release it. An idle session holds no goroutine.
type Brain struct {
	cfg   Config
	tails *tailCache

	// free holds a token per idle worker; leases carries claimed sessions to idle workers (see dispatch).
	free   chan struct{}
	leases chan *store.Lease

	mu      sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelCauseFunc
	wg      sync.WaitGroup
}

// New returns a brain for cfg, with the defaults filled in, or the reason cfg is invalid. It starts nothing:
// Start does.
func New(cfg Config) (*Brain, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Brain{cfg: cfg, tails: newTailCache(cfg.TailCacheBytes)}, nil
}

// Errors that end a brain's work on a session.
var (
	// errStopping: the brain is stopping. It appends nothing more to the session except a reschedule, and
	// releases it.
	errStopping = errors.New("harness: brain stopping")
	// errLeaseLost: another brain owns the session now. The brain stops at once and appends nothing more.
	errLeaseLost = fmt.Errorf("harness: %w", store.ErrLeaseLost)
)

// Start starts the workers. They run until Stop is called or ctx is done. A brain starts once: Start after
// Start or Stop fails.
func (b *Brain) Start(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.stopped:
		return errors.New("harness: brain stopped")
	case b.started:
		return errors.New("harness: brain already started")
	}
	b.started = true
	ctx, b.cancel = context.WithCancelCause(ctx)
	b.free = make(chan struct{}, b.cfg.Workers)
	b.leases = make(chan *store.Lease)
	for range b.cfg.Workers {
		b.free <- struct{}{}
		b.wg.Go(func() { b.worker(ctx) })
	}
	if b.cfg.Workers > 0 {
		b.wg.Go(func() { b.dispatch(ctx) })
	}
	return nil
}

// Stop stops the workers: in-flight appends finish, sessions in the middle of a turn are rescheduled for the
// next brain, leases are released, and Stop returns once every goroutine of the brain has exited. Idempotent,
// and safe before Start (the brain then never starts).
func (b *Brain) Stop() {
	b.mu.Lock()
	b.stopped = true
	if b.cancel != nil {
		b.cancel(errStopping)
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// Wake works one session now if it is runnable: it claims the session, runs it until its turn is over or it
// needs the client, and releases it. It returns store.ErrNoWork (wrapped) when the session is not runnable or
// another brain holds it. It is the single-session entry point for tests and tools; Start does the same for
// every session.
func (b *Brain) Wake(ctx context.Context, sessionID string) error {
	ls, err := b.cfg.Store.LeaseClaim(ctx, &store.LeaseClaimParams{Owner: b.cfg.Owner, TTL: b.cfg.LeaseTTL, SessionID: sessionID})
	if err != nil {
		return fmt.Errorf("harness: claim %s: %w", sessionID, err)
	}
	return b.work(ctx, ls[0])
}

// maxClaim is the most sessions one claim takes.
const maxClaim = 64

// dispatch claims runnable sessions for the idle workers and hands them out, until ctx is done.
//
// One claim takes as many sessions as there are idle workers (up to maxClaim), in one write: under a burst of
// runnable sessions the store sees one claim per group instead of one per session, and a wake-up sends one
// claimer to the store, not every idle worker (a thundering herd: with hundreds of workers polling on their own,
// most of the store's time went to claims that found nothing).
//
// While it waits for a wake-up, the idle workers it holds are offered to the store when the store takes offers
// (store.ClaimsOffered): a client's event that makes a session runnable then claims it for this brain in its own
// transaction, and the lease comes here once that has committed, with no claim of ours in between.
func (b *Brain) dispatch(ctx context.Context) {
	runnable, stop := b.cfg.Store.WaitRunnable()
	defer stop()
	var offered <-chan *store.Lease // nil without an offer: never ready
	var offer *store.ClaimOffer
	if st, ok := b.cfg.Store.(store.ClaimsOffered); ok {
		offer = store.NewClaimOffer(b.cfg.Owner, b.cfg.LeaseTTL, maxClaim)
		offered = offer.C()
		stopOffer := st.OfferClaims(offer)
		defer func() {
			stopOffer()
			ctx, cancel := context.WithTimeout(context.Background(), b.cfg.LeaseTTL)
			defer cancel()
			b.giveBack(offer.Settle(ctx))
		}()
	}
	// take hands a lease the offer delivered to an idle worker (the dispatcher holds one for it), or gives the
	// worker back when the take claimed nothing. It reports false when the brain is stopping.
	take := func(l *store.Lease) bool {
		if l == nil {
			b.free <- struct{}{}
			return true
		}
		select {
		case b.leases <- l:
			return true
		case <-ctx.Done():
			b.giveBack([]*store.Lease{l})
			return false
		}
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	var failing time.Time // when the claims began to fail, while they do: one line for an outage, not one a poll
	waiting := false      // for a wake-up or the poll, its idle workers offered; else for an idle worker
	for {
		var free, woken <-chan struct{}
		var polled <-chan time.Time
		if waiting {
			woken, polled = runnable, timer.C
		} else {
			free = b.free
		}
		select {
		case <-ctx.Done():
			return
		case l := <-offered:
			if !take(l) {
				return
			}
			continue
		case <-woken:
		case <-polled:
		case <-free:
		}
		if waiting {
			waiting = false
			if offer != nil {
				for range offer.Withdraw() {
					b.free <- struct{}{}
				}
			}
			continue
		}
		// An idle worker: count the others.
		n := 1
	count:
		for n < maxClaim {
			select {
			case <-b.free:
				n++
			default:
				break count
			}
		}
		leases, err := b.cfg.Store.LeaseClaim(ctx, &store.LeaseClaimParams{Owner: b.cfg.Owner, TTL: b.cfg.LeaseTTL, Limit: n})
		switch {
		case err != nil && ctx.Err() == nil && !errors.Is(err, store.ErrNoWork):
			if failing.IsZero() {
				failing = time.Now()
				b.cfg.Logger.Error("lease claims failing; retrying every poll", "err", err)
			}
		case !failing.IsZero() && ctx.Err() == nil:
			b.cfg.Logger.Info("lease claims succeed again", "after", time.Since(failing).Round(time.Millisecond))
			failing = time.Time{}
		}
		for i, l := range leases {
			select {
			case b.leases <- l:
			case <-ctx.Done():
				b.giveBack(leases[i:])
				return
			}
		}
		idle := n - len(leases)
		if idle == 0 {
			continue // more may be waiting
		}
		if offer != nil {
			idle -= offer.Open(idle)
		}
		for range idle {
			b.free <- struct{}{}
		}
		waiting = true
		timer.Reset(b.cfg.PollInterval)
	}
}

// giveBack releases claimed leases no worker took (the brain is stopping), their wake-ups unhandled, so that
// the next brain claims the sessions without waiting for the leases to expire.
func (b *Brain) giveBack(leases []*store.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.LeaseTTL)
	defer cancel()
	for _, l := range leases {
		unhandled := *l
		unhandled.WakeSeq = 0
		if err := b.cfg.Store.LeaseRelease(ctx, &unhandled); err != nil {
			b.cfg.Logger.Warn("lease release failed; the session waits for the lease to expire", "session", l.SessionID, "err", err)
		}
	}
}

// worker works the sessions dispatch hands it, one at a time, until ctx is done.
func (b *Brain) worker(ctx context.Context) {
	for {
		var l *store.Lease
		select {
		case <-ctx.Done():
			return
		case l = <-b.leases:
		}
		switch err := b.work(ctx, l); {
		case err == nil || ctx.Err() != nil:
		case errors.Is(err, store.ErrLeaseLost):
			b.cfg.Metrics.LeaseLost()
			b.cfg.Logger.Info("session taken over by another brain", "session", l.SessionID)
		default:
			b.cfg.Logger.Warn("session work failed; retried when its lease expires", "session", l.SessionID, "err", err)
		}
		b.free <- struct{}{}
	}
}

// work runs a claimed session until its turn is over (then releases it), the lease is lost (then it stops at
// once), or ctx is done (then it reschedules the session if a turn was in progress, and releases it).
func (b *Brain) work(ctx context.Context, l *store.Lease) error {
	leaseCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	h := &leaseHolder{lease: *l}
	var renewer sync.WaitGroup
	renewCtx, stopRenew := context.WithCancel(leaseCtx)
	renewer.Go(func() { b.renew(renewCtx, h, cancel) })
	defer func() { stopRenew(); renewer.Wait() }()

	r := &run{b: b, lease: h, ctx: leaseCtx, cancel: cancel}
	err := r.loop()
	r.endRun(err)
	stopRenew()
	renewer.Wait()
	if r.released {
		if err == nil {
			r.keepTails()
		}
		return err // handed back by the turn's last append
	}
	switch {
	case errors.Is(context.Cause(leaseCtx), errLeaseLost) || errors.Is(err, store.ErrLeaseLost):
		return errLeaseLost
	case err != nil && leaseCtx.Err() == nil:
		// A store or internal failure: keep the lease until it expires, so the session is retried after a pause.
		return err
	}
	// The turn is over, or the brain is stopping: hand the session back. Only a loop that ended on its own
	// looked at the log after the claim; a brain stopped before that (even before it read the log) may not
	// have acted on every wake-up, so it counts none as handled and the next brain looks again.
	handled := err == nil && leaseCtx.Err() == nil
	if err := r.release(handled); err != nil {
		return err
	}
	if handled {
		r.keepTails()
	}
	return nil
}
