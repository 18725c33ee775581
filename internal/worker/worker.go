// Package worker is the runtime of `corral worker`, self-hosted hands: it dials out only, long-polls the server
// for its environment's work items, holds each by heartbeats, follows the item's session with the item's
// sessions token and answers its built-in tool calls with user.tool_result, running them in sandboxes of the
// pool it is given, with the server's isolation, limits and egress rules. It places the session's memory stores,
// file resources and its agent's skills in them as a server's hands do, and writes back what the agent changed
// in the stores (memories) and left under /mnt/session/outputs (files, into the Files API, scoped to the
// session); it clones the session's repositories through the server's git relay, through which its sandboxes
// fetch and push too, without the repositories' tokens (repos). It imports neither the store nor the vault (internal/archtest): everything it knows comes through
// the public HTTP API (internal/client).
package worker

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/client"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/workspace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

const (
	pollBlockMS = 999
	backoffMax  = 30 * time.Second
	stopTimeout = 10 * time.Second
	// collectTimeout bounds one collection of a session's outputs and memory stores.
	collectTimeout = 2 * time.Minute
)

// DefaultIdle is how long a session whose turn ended keeps the worker before it goes back to polling.
const DefaultIdle = time.Minute

// DefaultUIDBase keeps a worker's sandbox uids apart from a server's on the same machine (bwrap 200000,
// oci and gvisor 300000).
const DefaultUIDBase = 400000

// Config configures a Worker. Zero fields take the defaults documented on them.
type Config struct {
	// Client calls the server with the environment key. Required.
	Client *client.Client
	// Environment is the self-hosted environment's id. Required.
	Environment string
	// ID is this worker's id, sent as Anthropic-Worker-ID (default DefaultID()).
	ID string
	// Pool configures the sandboxes the tools run in; its Provider is required, and its WorkspaceRoot with a
	// Provider whose workspaces are on this host (Capabilities.HostWorkspace). The worker sets its Logger (if
	// unset), its Egress (from AllowInternal and RootCAs), and its Placer and Outputs (the sessions' memory
	// stores, files, skills and outputs, over the API).
	Pool sandbox.PoolConfig
	// AllowInternal and RootCAs are the operator's trusted internal destinations and CAs, added to every
	// sandbox's egress policy.
	AllowInternal []string
	RootCAs       *x509.CertPool
	// Idle is how long a session whose turn ended keeps the worker (default DefaultIdle).
	Idle   time.Duration
	Logger *slog.Logger // default: discard
	// TracerProvider traces the tool calls (default: none).
	TracerProvider trace.TracerProvider
	// OnToolStart, if set, is called as each tool call starts (benchmarks).
	OnToolStart func(toolUseID string)
}

func (c *Config) validate() error {
	switch {
	case c.Client == nil:
		return errors.New("worker: Config.Client is required")
	case c.Environment == "":
		return errors.New("worker: Config.Environment is required")
	case c.Pool.Provider == nil:
		return errors.New("worker: Config.Pool.Provider is required")
	case c.Idle < 0:
		return errors.New("worker: Config.Idle must not be negative")
	}
	return nil
}

// Worker is one self-hosted worker. New builds it; Run runs it until its context ends.
type Worker struct {
	w    *worker
	pool *sandbox.Pool
}

// New validates cfg and builds the worker and its sandbox pool; nothing runs until Run.
func New(cfg Config) (*Worker, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	tp := cfg.TracerProvider
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	pc := cfg.Pool
	if pc.Logger == nil {
		pc.Logger = logger
	}
	// The sessions' memory stores and files are placed at their mount paths, their agents' skills under
	// sandbox.SkillsMount, and the stores and outputs collected back, through the API with the sessions token of
	// each session's work item (held). Their repositories are cloned, fetched and pushed through the server's
	// git relay with the same token (repos): the repositories' tokens stay on the server.
	h := newHeld()
	fls := filesAPI{held: h}
	rp := newRepos(cfg.Client.BaseURL(), cfg.Client.HTTPClient(), h, pc.Logger)
	pc.Egress = egress{allowInternal: cfg.AllowInternal, roots: cfg.RootCAs, repos: rp}
	placer, err := workspace.New(workspace.Config{Memories: newMemories(h), Files: fls, Skills: fls, Remote: rp.remote, Logger: pc.Logger})
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	pc.Placer, pc.Outputs = placer, placer
	pool, err := sandbox.NewPool(pc)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	w := &worker{c: cfg.Client, env: cfg.Environment, id: cfg.ID, pool: pool, held: h, idle: cmp.Or(cfg.Idle, DefaultIdle),
		log: logger, tracer: tp.Tracer("github.com/corralhq/corral/internal/worker"), onToolStart: cfg.OnToolStart}
	if w.id == "" {
		w.id = DefaultID()
	}
	return &Worker{w: w, pool: pool}, nil
}

// ID is the worker's id.
func (w *Worker) ID() string { return w.w.id }

// Run starts the pool and polls until ctx ends (nil) or the server refuses the key; it stops the pool (its
// sandboxes) before it returns.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.pool.Start(ctx); err != nil {
		return err
	}
	defer w.pool.Stop()
	err := w.w.run(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// egress adds the operator's trusted internal destinations and CAs to every sandbox's egress policy, and serves
// its git endpoint (the session's repositories, through the server's git relay).
type egress struct {
	allowInternal []string
	roots         *x509.CertPool
	repos         *repos
}

func (e egress) Egress(_ context.Context, r *sandbox.Recipe) (*sandbox.Egress, error) {
	return &sandbox.Egress{AllowInternal: e.allowInternal, RootCAs: e.roots, Local: e.repos.handler(r.SessionID)}, nil
}

// DefaultID is a worker id: the host name and a random suffix.
func DefaultID() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails.
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "corral-worker"
	}
	return host + "-" + hex.EncodeToString(b[:])
}

type worker struct {
	c    *client.Client // with the environment key
	env  string
	id   string
	pool *sandbox.Pool
	// held is the sessions whose work items the worker holds: what the pool's workspace reaches of each.
	held *held
	idle time.Duration
	log  *slog.Logger
	// tracer traces the tool calls (noop without OTEL_* configuration).
	tracer trace.Tracer
	// onToolStart, if set, is called as each tool call starts (benchmarks).
	onToolStart func(toolUseID string)
}

// fatal reports whether an API error will not go away by retrying: a 4xx other than 408, 409 and 429.
func fatal(err error) bool {
	var e *client.Error
	return errors.As(err, &e) && e.Status >= 400 && e.Status < 500 && e.Status != http.StatusRequestTimeout &&
		e.Status != http.StatusConflict && e.Status != http.StatusTooManyRequests
}

func statusOf(err error) int {
	var e *client.Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// run polls until ctx ends or the server refuses the key.
func (w *worker) run(ctx context.Context) error {
	backoff := time.Second
	for ctx.Err() == nil {
		wk, err := w.c.WorkPoll(ctx, w.env, &client.WorkPollParams{BlockMS: pollBlockMS, WorkerID: w.id})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if fatal(err) {
				return fmt.Errorf("poll: %w", err)
			}
			w.log.Warn("poll failed; backing off", "err", err, "sleep", backoff)
			sleepCtx(ctx, backoff)
			backoff = min(2*backoff, backoffMax)
			continue
		}
		backoff = time.Second
		if wk == nil {
			continue // the server held the poll for up to a second
		}
		if _, err := w.c.WorkAck(ctx, w.env, wk.ID); err != nil {
			w.log.Warn("ack failed; skipping the item", "work_id", wk.ID, "session", wk.Data.ID, "err", err)
			continue
		}
		w.log.Info("claimed work", "work_id", wk.ID, "session", wk.Data.ID)
		if err := w.handle(ctx, wk); err != nil && ctx.Err() == nil {
			w.log.Warn("work item ended with an error", "work_id", wk.ID, "session", wk.Data.ID, "err", err)
		}
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// handle serves one work item: heartbeats in the background, the session's tool calls in the foreground; then it
// stops the item, unless its lease was lost (another worker may hold it by now).
func (w *worker) handle(ctx context.Context, wk *apitype.Work) error {
	if wk.Data.Type != apitype.ObjectSession || wk.Secret == nil {
		_, err := w.c.WorkStop(ctx, w.env, wk.ID, true)
		return err
	}
	token := apitype.SessionsTokenFromSecret(*wk.Secret)
	if token == "" {
		_, err := w.c.WorkStop(ctx, w.env, wk.ID, true)
		return errors.Join(errors.New("the item's secret carries no sessions token"), err)
	}
	tc := w.c.WithKey(token)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var lost bool
	var hb sync.WaitGroup
	hb.Go(func() {
		lost = w.heartbeat(sctx, tc, wk)
		cancel()
	})
	err := w.serve(sctx, tc, wk.Data.ID)
	cancel()
	hb.Wait()
	if lost {
		w.log.Info("lease lost; the item is left to the server", "work_id", wk.ID, "session", wk.Data.ID)
		return err
	}
	stopCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer stop()
	if _, serr := tc.WorkStop(stopCtx, w.env, wk.ID, true); serr != nil && statusOf(serr) != http.StatusConflict &&
		statusOf(serr) != http.StatusUnauthorized {
		err = errors.Join(err, fmt.Errorf("stop: %w", serr))
	}
	return err
}

// heartbeat keeps the lease until ctx ends; it returns true if the lease was lost (412, or no success for a
// whole TTL), false when it ends because the item is stopping or the work is over.
func (w *worker) heartbeat(ctx context.Context, tc *client.Client, wk *apitype.Work) bool {
	last, ttl := apitype.NoHeartbeat, 30*time.Second
	lastOK := time.Now()
	for {
		hb, err := tc.WorkHeartbeat(ctx, w.env, wk.ID, last, 0)
		switch {
		case ctx.Err() != nil:
			return false
		case statusOf(err) == http.StatusPreconditionFailed || statusOf(err) == http.StatusUnauthorized:
			w.log.Warn("lease lost", "work_id", wk.ID, "session", wk.Data.ID, "err", err)
			return true
		case err != nil && (fatal(err) || time.Since(lastOK) > ttl):
			w.log.Warn("heartbeat failed; the lease is presumed lost", "work_id", wk.ID, "session", wk.Data.ID, "err", err)
			return true
		case err != nil:
			w.log.Warn("heartbeat failed", "work_id", wk.ID, "session", wk.Data.ID, "err", err)
		default:
			w.log.Debug("heartbeat", "work_id", wk.ID, "session", wk.Data.ID, "state", hb.State, "ttl_seconds", hb.TTLSeconds)
			last, lastOK = hb.LastHeartbeat, time.Now()
			if hb.TTLSeconds > 0 {
				ttl = time.Duration(hb.TTLSeconds) * time.Second
			}
			if hb.State == apitype.WorkStopping || hb.State == apitype.WorkStopped || !hb.LeaseExtended {
				w.log.Info("the server stops the item", "work_id", wk.ID, "session", wk.Data.ID, "state", hb.State)
				return false
			}
		}
		sleepCtx(ctx, min(max(ttl/3, 200*time.Millisecond), 30*time.Second))
	}
}

// call is a built-in tool call of the session, with what the log says about it.
type call struct {
	id         string
	name       string
	input      json.RawMessage
	permission apitype.Permission
	confirmed  apitype.ConfirmationResult
	// traceparent is the trace of the brain's turn that made the call (apitype.TraceParentField): the call's
	// span continues it.
	traceparent string
}

// serve answers the session's built-in tool calls until the session ends, ctx ends, or the session's turn has
// been over for w.idle.
func (w *worker) serve(ctx context.Context, tc *client.Client, sessionID string) error {
	env, err := tc.EnvironmentGet(ctx, w.env)
	if err != nil {
		return fmt.Errorf("environment: %w", err)
	}
	sess, err := tc.SessionGet(ctx, sessionID)
	if err != nil {
		return fmt.Errorf("session: %w", err)
	}
	if sess.Status == apitype.StatusTerminated {
		return nil
	}
	recipe := recipeOf(sess, env.Config)
	release := w.held.hold(sessionID, tc, &recipe)
	defer release()
	// What the session left in its outputs and changed in its memory stores is collected before the worker lets
	// the item go (its sessions token ends with it), and at the end of each turn.
	defer w.collect(ctx, &recipe)
	calls := map[string]*call{}
	answered := map[string]bool{}
	var order []string
	// note records an event; it returns the call the event makes runnable, if any.
	note := func(ev *client.Event) *call {
		switch ev.Type {
		case apitype.EventAgentToolUse:
			var u struct {
				apitype.AgentToolUse
				TraceParent string `json:"traceparent"`
			}
			if ev.Decode(&u) != nil {
				return nil
			}
			c := &call{id: ev.ID, name: u.Name, input: u.Input, permission: u.EvaluatedPermission, traceparent: u.TraceParent}
			calls[ev.ID] = c
			order = append(order, ev.ID)
			if c.permission == apitype.PermissionAllow {
				return c
			}
		case apitype.EventUserToolConfirmation:
			var cf apitype.UserToolConfirmation
			if ev.Decode(&cf) == nil {
				if c := calls[cf.ToolUseID]; c != nil && c.permission == apitype.PermissionAsk && c.confirmed == "" {
					c.confirmed = cf.Result
					if cf.Result == apitype.ConfirmAllow {
						return c
					}
				}
			}
		case apitype.EventUserToolResult, apitype.EventAgentToolResult:
			var r struct {
				ToolUseID string `json:"tool_use_id"`
			}
			if ev.Decode(&r) == nil {
				answered[r.ToolUseID] = true
			}
		}
		return nil
	}

	// The history first: the calls it leaves unanswered run now, in order.
	last := "0"
	for ev, err := range tc.Events(ctx, sessionID, nil) {
		if err != nil {
			return fmt.Errorf("history: %w", err)
		}
		note(ev)
		last = ev.ID
	}
	for _, id := range order {
		c := calls[id]
		if !answered[id] && (c.permission == apitype.PermissionAllow || c.confirmed == apitype.ConfirmAllow) {
			if err := w.runCall(ctx, tc, recipe, sessionID, c, answered); err != nil {
				return err
			}
		}
	}

	// Then what follows, live.
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	var idleTimer *time.Timer
	defer func() {
		if idleTimer != nil {
			idleTimer.Stop()
		}
	}()
	var runErr error
	err = tc.Follow(fctx, sessionID, &client.StreamParams{LastEventID: last}, func(ev *client.Event) bool {
		if idleTimer != nil {
			idleTimer.Stop()
			idleTimer = nil
		}
		if ev.Type == apitype.EventSessionStatusRunning {
			// A turn starts: the session's resources as they are now (files added or deleted since), for the
			// next provisioning of its sandbox.
			if s, err := tc.SessionGet(fctx, sessionID); err == nil {
				recipe = recipeOf(s, env.Config)
				w.held.hold(sessionID, tc, &recipe)
			}
		}
		if ev.TurnOver() && ev.Type == apitype.EventSessionStatusIdle {
			w.collect(fctx, &recipe)
			idleTimer = time.AfterFunc(w.idle, stop)
		}
		if c := note(ev); c != nil && !answered[c.id] {
			if runErr = w.runCall(fctx, tc, recipe, sessionID, c, answered); runErr != nil {
				return false
			}
		}
		return true
	})
	if runErr != nil {
		return runErr
	}
	if err != nil && fctx.Err() == nil {
		return fmt.Errorf("follow: %w", err)
	}
	return nil
}

// recipeOf is the recipe of a session's sandbox on a worker, as a server's brain builds it (internal/harness):
// the session's memory_store and file resources (placed through the API), its repositories (cloned through
// the server's git relay) and its agent's skills.
func recipeOf(sess *apitype.Session, env apitype.EnvConfig) sandbox.Recipe {
	var res []apitype.Resource
	for _, r := range sess.Resources {
		if r.Type == apitype.ResourceMemoryStore || r.Type == apitype.ResourceFile || r.Type == apitype.ResourceGitHubRepository {
			res = append(res, r)
		}
	}
	return sandbox.Recipe{SessionID: sess.ID, Environment: env, Resources: res, Skills: sess.Agent.Skills}
}

// collect stores what the session left under sandbox.OutputsMount as files scoped to it and writes back what it
// changed in its read_write memory stores (sandbox.Pool.CollectOutputs), even once ctx has ended (the worker
// stops, or the lease is lost), within collectTimeout.
func (w *worker) collect(ctx context.Context, recipe *sandbox.Recipe) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), collectTimeout)
	defer cancel()
	if err := w.pool.CollectOutputs(ctx, recipe); err != nil {
		w.log.Warn("outputs or memory stores not collected", "session", recipe.SessionID, "err", err)
	}
}

// runCall runs one call in the session's sandbox and posts its user.tool_result.
func (w *worker) runCall(ctx context.Context, tc *client.Client, recipe sandbox.Recipe, sessionID string, c *call, answered map[string]bool) error {
	if w.onToolStart != nil {
		w.onToolStart(c.id)
	}
	input := c.input
	if len(input) == 0 {
		input = json.RawMessage("{}")
	}
	ctx, span := w.startToolSpan(ctx, sessionID, c)
	// The worker's calls run in the sandbox's default shell (Call.Shell ""), whatever thread made them.
	res, err := w.pool.Execute(ctx, &sandbox.Call{Recipe: recipe, Name: c.name, Input: input, OnProvision: w.provisionSpan(ctx)})
	src := sandbox.HandsFailure(w.pool.Backend(), res, err)
	endToolSpan(span, src, res, err)
	if ctx.Err() != nil {
		return ctx.Err() // the lease is gone or the worker stops: the server settles the call
	}
	content, isErr := res.Content, res.IsError
	if err != nil && len(content) == 0 {
		content, isErr = []apitype.ContentBlock{apitype.TextBlock(fmt.Sprintf("The sandbox failed while running this tool, so its outcome is unknown (%v).", err))}, true
	}
	if len(content) == 0 {
		content = []apitype.ContentBlock{apitype.TextBlock("(no output)")}
	}
	ev, err := apitype.MakeEvent(apitype.EventUserToolResult, apitype.UserToolResult{ToolUseID: c.id, Content: content, IsError: isErr || err != nil, Source: src})
	if err != nil {
		return err
	}
	backoff := 500 * time.Millisecond
	for attempt := 0; ; attempt++ {
		_, err := tc.EventSend(ctx, sessionID, ev)
		if err == nil {
			answered[c.id] = true
			w.log.Info("tool call answered", "session", sessionID, "tool_use_id", c.id, "tool", c.name, "is_error", isErr)
			return nil
		}
		if fatal(err) || attempt >= 5 || ctx.Err() != nil {
			return fmt.Errorf("post the result of %s: %w", c.id, err)
		}
		sleepCtx(ctx, backoff)
		backoff *= 2
	}
}
