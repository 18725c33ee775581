package sandbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral/internal/apitype"
)

// DefaultIdleTimeout is how long a session's sandbox may sit unused before the Pool reaps it (serve's
// --sandbox-idle default).
const DefaultIdleTimeout = 10 * time.Minute

// PoolConfig configures a Pool.
type PoolConfig struct {
	// Provider provisions the sandboxes. Required.
	Provider Provider
	// WorkspaceRoot holds the sessions' workspaces and session directories on this host, for a Provider with
	// Capabilities.HostWorkspace or StagedWorkspace: a session's HostDirs are WorkspaceRoot/<session id>
	// (created 0700; the provider gives it to the sandbox's uid) and SessionDir(WorkspaceRoot, <session id>).
	// Required for such a Provider; the Pool makes nothing under it for another.
	WorkspaceRoot string
	// IdleTimeout is how long an unused sandbox lives; default DefaultIdleTimeout.
	IdleTimeout time.Duration
	// Logger receives provisioning and reaping; default discards.
	Logger *slog.Logger
	// Limits apply to every sandbox whose recipe leaves a limit zero (the backends' defaults apply after).
	Limits Limits
	// Placer places session resources (git repositories) in workspaces before a sandbox is provisioned
	// (internal/workspace). Without one, a session's resources are reported as not placed (ErrNoPlacer).
	Placer Placer
	// Egress, if set, builds each sandbox's Recipe.Egress (internal/proxy: the git endpoint, credentials
	// injected at egress). A failure fails the provisioning.
	Egress EgressSource
	// Volumes, if set, gives every workspace under WorkspaceRoot, and every session directory beside it, a
	// filesystem of its own with a size and inode quota (internal/sandbox/volume), attached before the session's
	// first sandbox and detached when its slot goes. A failure to attach fails the provisioning with the reason.
	Volumes Volumes
	// Quota, if set, admits each new sandbox against a share counted outside this pool (a workspace's live
	// sandboxes, across every brain): a refusal fails the provisioning with its reason, which the model reads
	// as the tool's error; the admission ends when the sandbox closes.
	Quota Quota
	// Images, if set, gives each sandbox the root filesystem of its environment's image (HostDirs.RootFS),
	// waiting for its build, or, for a Provider that takes images by reference (RootFSImageRef), the image's
	// reference (HostDirs.Image) if the Images are ImageRefs; a failed build fails the provisioning with an
	// *ImageError. Nil: sandboxes run on the host's layout. A server's sandboxes
	// are all of cloud environments; corral worker's, of a self-hosted one, get the image its Images choose
	// (the worker's packages).
	Images Images
	// Outputs, if set, collects the files a session leaves under OutputsMount (into the Files API) from its
	// HostDirs.Outputs, for a Provider with HostWorkspace or StagedWorkspace (once its sandbox has copied them
	// back: Syncer): when the brain ends a turn (CollectOutputs), and before a sandbox is reaped, replaced or
	// stopped.
	Outputs Collector
	// MaxStarting bounds the sandboxes the pool starts at once (the Provider's Provision, once the sandbox's
	// image and egress are ready); the others wait their turn, in the order they came, for as long as their
	// call's context allows. A burst of sessions' first tool calls otherwise starts as many sandboxes at once:
	// their processes then outnumber the server's threads on the host's CPUs, and every session's turn slows,
	// while the starts, which share the same CPUs, end no sooner. A start that takes longer than StartTurn
	// gives its turn up and goes on uncounted, so that one stuck start cannot hold the others back. 0: no bound.
	MaxStarting int
}

// Collector collects a session's outputs: the files under host.Outputs() not collected before (or changed
// since). internal/workspace implements it.
type Collector interface {
	Collect(ctx context.Context, r *Recipe, host HostDirs) error
}

// Noticer is implemented by a Collector that has something to tell a session's agent about what it collected
// (a memory file it could not store, and why): the Pool puts the notices it takes, as one text block, in front
// of the session's next tool result. TakeNotices returns the session's pending notices and forgets them; it is
// called on every tool result, so a session without any must cost next to nothing.
type Noticer interface {
	TakeNotices(sessionID string) []string
}

// OutputCollector is implemented by hands that collect a session's outputs (*Pool does); the brain calls it
// at the end of each turn, before the session goes idle.
type OutputCollector interface {
	CollectOutputs(ctx context.Context, r *Recipe) error
}

// collectTimeout bounds a collection the Pool starts on its own (reaping, replacing, stopping).
const collectTimeout = 2 * time.Minute

func (c *PoolConfig) validate() error {
	if c.Provider == nil {
		return errors.New("sandbox pool: Provider is required")
	}
	if err := validTools(c.Provider.Tools()); err != nil {
		return fmt.Errorf("sandbox pool: provider %s: %w", c.Provider.Name(), err)
	}
	if (c.WorkspaceRoot != "" || c.Provider.Capabilities().KeepsHostDirs()) && !filepath.IsAbs(c.WorkspaceRoot) {
		return fmt.Errorf("sandbox pool: WorkspaceRoot %q must be an absolute path", c.WorkspaceRoot)
	}
	if c.IdleTimeout < 0 || c.MaxStarting < 0 {
		return errors.New("sandbox pool: IdleTimeout and MaxStarting must not be negative")
	}
	return nil
}

// Pool is the sessions' hands: it provisions a session's sandbox lazily on its first tool call, reuses it,
// reaps it when idle, and replaces a dead one from the same recipe on the next call. The workspace outlives
// every sandbox.
type Pool struct {
	cfg PoolConfig

	mu       sync.Mutex
	sessions map[string]*session
	started  bool
	stopped  bool

	stop   chan struct{}
	reaped sync.WaitGroup

	reclaiming atomic.Bool // reclaimIdle is reaping

	// starting holds a token for each sandbox being started, up to PoolConfig.MaxStarting; nil: no bound. A
	// start gives its token back when it ends, or after startTurn.
	starting  chan struct{}
	startTurn time.Duration

	noticer Noticer // PoolConfig.Outputs, if it has notices for the agents

	// collecting serialises the collections of a session with the copies back before them (a Syncer replaces
	// the directories the collector walks): session id -> *sync.Mutex, forgotten with its workspace.
	collecting sync.Map
}

// session is one session's slot. mu serialises provisioning; the sandbox then serves calls concurrently.
type session struct {
	mu       sync.Mutex
	sb       Sandbox
	removed  bool
	inflight int
	lastUsed time.Time
	// unplaced are resources that could not be placed, for a note in front of the next tool result.
	unplaced []*ResourceError
	// detach, once the session's volumes are attached, detaches them when the slot closes.
	detach func() error
	// recipe and host are the recipe and host directories of the session's last provisioning (for the
	// collection of its outputs).
	recipe *Recipe
	host   HostDirs
}

var _ Hands = (*Pool)(nil)

// NewPool returns a Pool. It serves calls at once; Start starts its reaper, and Stop stops both.
func NewPool(cfg PoolConfig) (*Pool, error) {
	cfg.IdleTimeout = cmp.Or(cfg.IdleTimeout, DefaultIdleTimeout)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Provider.Capabilities().KeepsHostDirs() {
		if err := os.MkdirAll(cfg.WorkspaceRoot, 0o711); err != nil {
			return nil, fmt.Errorf("sandbox pool: workspace root: %w", err)
		}
	}
	p := &Pool{cfg: cfg, sessions: map[string]*session{}, stop: make(chan struct{})}
	if cfg.MaxStarting > 0 {
		p.starting, p.startTurn = make(chan struct{}, cfg.MaxStarting), StartTurn
	}
	p.noticer, _ = cfg.Outputs.(Noticer)
	if r, ok := cfg.Volumes.(Reclaimer); ok {
		r.SetReclaim(p.reclaimIdle)
	}
	return p, nil
}

// Start starts the reaper, which closes sandboxes idle for IdleTimeout, until Stop (or until ctx is done). It
// may be called once, and not after Stop.
func (p *Pool) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started || p.stopped {
		return errors.New("sandbox pool: already started or stopped")
	}
	p.started = true
	p.reaped.Go(func() { p.reap(ctx) })
	return nil
}

// Tools are the built-in tools of the pool's provider.
func (p *Pool) Tools() []Tool { return p.cfg.Provider.Tools() }

// validTools checks that every tool has a name of its own and an object schema.
func validTools(tools []Tool) error {
	seen := map[string]bool{}
	for _, t := range tools {
		if t.Name == "" || seen[t.Name] {
			return fmt.Errorf("tool name %q is empty or repeated", t.Name)
		}
		seen[t.Name] = true
		var schema struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(t.InputSchema, &schema); err != nil || schema.Type != "object" {
			return fmt.Errorf("tool %s: the input schema must be a JSON object schema", t.Name)
		}
	}
	return nil
}

// ErrPoolStopped is returned by Execute after Stop.
var ErrPoolStopped = errors.New("sandbox pool stopped")

// Execute runs one tool call in the session's sandbox, provisioning it first if the session has none. When the
// sandbox dies, Execute returns an error wrapping ErrSandboxDead together with an error Result the brain can
// hand to the model as is; the next call provisions a fresh sandbox with the same workspace.
func (p *Pool) Execute(ctx context.Context, call *Call) (Result, error) {
	r, err := p.recipe(call)
	if err != nil {
		return errorResult(err.Error()), err
	}
	for {
		s, err := p.session(r.SessionID)
		if err != nil {
			return errorResult(err.Error()), err
		}
		sb, ok, err := p.acquire(ctx, s, call, &r)
		if err != nil {
			return errorResult(fmt.Sprintf("could not start a sandbox: %v", err)), err
		}
		if !ok {
			continue // the session was closed meanwhile; start over with a new slot
		}
		res, err := sb.Execute(ctx, call.Shell, call.Name, call.Input)
		p.release(s, sb, err)
		notes := resourceNotes(s.takeUnplaced())
		if p.noticer != nil {
			if n := p.noticer.TakeNotices(r.SessionID); len(n) > 0 {
				notes = append(notes, apitype.TextBlock(strings.Join(n, "\n")))
			}
		}
		if errors.Is(err, ErrSandboxDead) {
			p.cfg.Logger.Warn("sandbox died", "session", r.SessionID, "backend", p.cfg.Provider.Name(), "err", err)
			res = errorResult(fmt.Sprintf("The sandbox died while running this tool call (%v); its outcome is unknown. "+
				"The next tool call starts a fresh sandbox with the same /workspace; processes, /tmp and shell state are lost.", err))
		}
		res.Content = append(notes, res.Content...)
		return res, err
	}
}

// recipe is the call's recipe with the pool's limits for every limit the recipe leaves zero.
func (p *Pool) recipe(call *Call) (Recipe, error) {
	r := call.Recipe
	if err := validSessionID(r.SessionID); err != nil {
		return r, err
	}
	l, d := &r.Limits, p.cfg.Limits
	l.MemoryBytes = cmp.Or(l.MemoryBytes, d.MemoryBytes)
	l.Pids = cmp.Or(l.Pids, d.Pids)
	l.CPUQuota = cmp.Or(l.CPUQuota, d.CPUQuota)
	l.CommandTimeout = cmp.Or(l.CommandTimeout, d.CommandTimeout)
	l.OutputBytes = cmp.Or(l.OutputBytes, d.OutputBytes)
	l.TmpBytes = cmp.Or(l.TmpBytes, d.TmpBytes)
	l.TmpInodes = cmp.Or(l.TmpInodes, d.TmpInodes)
	return r, nil
}

var _ Provisioner = (*Pool)(nil)

// Backend is the name of the pool's sandbox backend (its Provider's).
func (p *Pool) Backend() string { return p.cfg.Provider.Name() }

// Provision provisions the session's sandbox now, without a tool call, if it has none, and waits until the new
// sandbox is ready: it answers a no-op call (bash "true"), as a coupled design's container is ready to run tools
// before the first model call. An existing sandbox is only marked used. Provision exists for comparing with a
// coupled design (harness.Config.EagerHands): lazy provisioning on the first tool call is the rule.
func (p *Pool) Provision(ctx context.Context, call *Call) error {
	r, err := p.recipe(call)
	if err != nil {
		return err
	}
	fresh := false
	c := *call
	c.OnProvision = func(rep ProvisionReport) {
		fresh = true
		if call.OnProvision != nil {
			call.OnProvision(rep)
		}
	}
	for {
		s, err := p.session(r.SessionID)
		if err != nil {
			return err
		}
		sb, ok, err := p.acquire(ctx, s, &c, &r)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if fresh {
			_, err = sb.Execute(ctx, "", "bash", json.RawMessage(`{"command":"true"}`))
		}
		p.release(s, sb, err)
		return err
	}
}

func errorResult(text string) Result {
	return Result{Content: []apitype.ContentBlock{apitype.TextBlock(text)}, IsError: true}
}

// validSessionID rejects ids that cannot name a directory of their own.
func validSessionID(id string) error {
	if id == "" || id == "." || id == ".." || strings.ContainsAny(id, "/\\\x00") || len(id) > 200 {
		return fmt.Errorf("sandbox pool: invalid session id %q", id)
	}
	return nil
}

func (p *Pool) session(id string) (*session, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return nil, ErrPoolStopped
	}
	s := p.sessions[id]
	if s == nil {
		s = &session{}
		p.sessions[id] = s
	}
	return s, nil
}

// acquire returns the session's sandbox, provisioning one if needed, and counts the call in flight. ok is false
// when the session was removed before the sandbox could be handed out.
func (p *Pool) acquire(ctx context.Context, s *session, call *Call, r *Recipe) (Sandbox, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.removed {
		return nil, false, nil
	}
	if s.sb == nil {
		sb, host, unplaced, err := p.provision(ctx, s, call, r)
		s.unplaced = append(s.unplaced, unplaced...)
		if err != nil {
			return nil, true, err
		}
		s.sb = sb
		rc := *r
		s.recipe, s.host = &rc, host
	}
	s.inflight++
	s.lastUsed = time.Now()
	return s.sb, true, nil
}

// provision places the session's resources not yet placed in its workspace, then provisions a sandbox, and
// returns it with the host directories it was given. It returns the resources that could not be placed: the
// sandbox is provisioned without them.
func (p *Pool) provision(ctx context.Context, s *session, call *Call, r *Recipe) (Sandbox, HostDirs, []*ResourceError, error) {
	backend := p.cfg.Provider.Name()
	caps := p.cfg.Provider.Capabilities()
	if call.OnProvision != nil {
		call.OnProvision(ProvisionReport{Backend: backend, Image: p.pendingImage(r, caps)})
	}
	start := time.Now()
	var sb Sandbox
	var unplaced []*ResourceError
	host := p.hostDirs(r.SessionID, caps)
	var err error
	if caps.KeepsHostDirs() {
		err = p.prepareHost(ctx, s, host)
	}
	if err == nil {
		unplaced = p.place(ctx, r, host)
		sb, err = p.start(ctx, r, &host, caps)
	}
	d := time.Since(start)
	if call.OnProvision != nil {
		call.OnProvision(ProvisionReport{Backend: backend, Done: true, Duration: d, Err: err, ResourceErrors: unplaced})
	}
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
			// The caller gave up mid-provisioning: the runtime's own failure (a killed process) is a symptom.
			err = fmt.Errorf("%w: %w", ctxErr, err)
		}
		p.cfg.Logger.Error("sandbox provisioning failed", "session", r.SessionID, "backend", backend, "err", err)
		return nil, host, unplaced, fmt.Errorf("%w: %s sandbox: %w", ErrProvision, backend, err)
	}
	p.cfg.Logger.Info("sandbox provisioned", "session", r.SessionID, "backend", backend, "duration", d)
	return sb, host, unplaced, nil
}

// pendingImage is the status of the image the sandbox of r will wait for (start acquires it), if the Images
// say it is still building; nil if it is built, failed, not acquired here, or the Images cannot say.
func (p *Pool) pendingImage(r *Recipe, caps Capabilities) *apitype.EnvironmentImage {
	is, ok := p.cfg.Images.(ImageStatus)
	if !ok {
		return nil
	}
	if _, refs := p.cfg.Images.(ImageRefs); caps.RootFS == RootFSImageRef && !refs {
		return nil // the provider runs its own image
	}
	if img := is.Image(&r.Environment); img != nil && img.Status == apitype.ImageBuilding {
		return img
	}
	return nil
}

// hostDirs are the directories of this host the session's sandboxes use, as far as caps use them: its
// workspace and session directory under WorkspaceRoot with HostWorkspace or StagedWorkspace, none otherwise.
// The image root (RootFS) is acquired for each provisioning (start).
func (p *Pool) hostDirs(sessionID string, caps Capabilities) HostDirs {
	if !caps.KeepsHostDirs() {
		return HostDirs{}
	}
	return HostDirs{Workspace: filepath.Join(p.cfg.WorkspaceRoot, sessionID), Session: p.sessionDir(sessionID)}
}

// prepareHost makes the session's workspace and session directories on this host (attaching its volumes first),
// for a Provider with Capabilities.HostWorkspace or StagedWorkspace.
func (p *Pool) prepareHost(ctx context.Context, s *session, host HostDirs) error {
	err := p.attach(ctx, s, host.Workspace, host.Session)
	if err == nil {
		err = os.MkdirAll(host.Workspace, 0o700)
	}
	if err == nil {
		err = os.MkdirAll(host.Uploads(), 0o755)
	}
	if err == nil {
		err = os.MkdirAll(host.Skills(), 0o755)
	}
	if err == nil {
		err = os.MkdirAll(host.Outputs(), 0o700) // the backend gives it to the sandbox's uid
	}
	if err == nil {
		// Made by the MkdirAll above (0755) or the root of its volume: no other user of the host lists it, or
		// reads the session's uploads, skills and memories through it.
		err = os.Chmod(host.Session, 0o711)
	}
	if err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	return nil
}

// attach attaches the session's volumes (its workspace and its session directory, both under WorkspaceRoot:
// the outputs the sandbox writes there count against a quota too, and neither shows a host path in the
// sandbox's mount table), unless they are attached or the pool has no Volumes. s.mu is held.
func (p *Pool) attach(ctx context.Context, s *session, dirs ...string) error {
	v := p.cfg.Volumes
	if v == nil || s.detach != nil {
		return nil
	}
	var attached []string
	detach := func() error {
		var errs []error
		for _, dir := range slices.Backward(attached) {
			errs = append(errs, v.Detach(dir))
		}
		return errors.Join(errs...)
	}
	for _, dir := range dirs {
		err := v.Attach(ctx, dir)
		// No room: the idle sandboxes give theirs back, the longest idle first, until this one fits.
		for errors.Is(err, ErrNoRoom) {
			idle := p.evictIdle(s)
			if idle == nil {
				break
			}
			p.closeIdle(idle, "reaping an idle sandbox: another session needs its volumes' room")
			err = v.Attach(ctx, dir)
		}
		if err != nil {
			_ = detach()
			return err
		}
		attached = append(attached, dir)
	}
	s.detach = detach
	return nil
}

// release ends a call; a dead sandbox is closed and forgotten so that the next call provisions a new one.
func (p *Pool) release(s *session, sb Sandbox, err error) {
	s.mu.Lock()
	s.inflight--
	s.lastUsed = time.Now()
	dead := errors.Is(err, ErrSandboxDead) && s.sb == sb
	if dead {
		s.sb = nil
	}
	rec, host := s.recipe, s.host
	s.mu.Unlock()
	if dead {
		_ = sb.Close()
		p.collect(nil, rec, host) // nothing to copy back from a dead sandbox
	}
}

// sessionDir is the session directory the pool gives a session (SessionDir).
func (p *Pool) sessionDir(id string) string { return SessionDir(p.cfg.WorkspaceRoot, id) }

// SessionDir is the host directory of a session's uploads, outputs and skills (HostDirs.Session) under a
// workspace root, beside its workspace. Its name starts with a dot, so RemoveWorkspaces never takes it for a
// session's workspace.
func SessionDir(workspaceRoot, sessionID string) string {
	return filepath.Join(workspaceRoot, ".mnt-"+sessionID)
}

// collect collects the outputs of the recipe's session from its host directories, if the pool has a collector
// and the session's sandbox had an outputs directory on this host, once sb (if a Syncer) has copied them back;
// failures are logged.
func (p *Pool) collect(sb Sandbox, r *Recipe, host HostDirs) {
	if p.cfg.Outputs == nil || r == nil || host.Outputs() == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), collectTimeout)
	defer cancel()
	if err := p.syncAndCollect(ctx, sb, r, host); err != nil {
		p.cfg.Logger.Warn("session outputs not collected", "session", r.SessionID, "err", err)
	}
}

var _ OutputCollector = (*Pool)(nil)

// CollectOutputs collects the session's outputs now (the brain calls it when a turn ends). Without a collector,
// for a Provider without host workspaces, or for a session that never had a sandbox here, there is nothing to
// collect.
func (p *Pool) CollectOutputs(ctx context.Context, call *Recipe) error {
	if p.cfg.Outputs == nil {
		return nil
	}
	r, err := p.recipe(&Call{Recipe: *call})
	if err != nil {
		return err
	}
	host := p.hostDirs(r.SessionID, p.cfg.Provider.Capabilities())
	if host.Outputs() == "" {
		return nil
	}
	if _, err := os.Stat(host.Outputs()); err != nil {
		return nil // no sandbox ever had it
	}
	return p.syncAndCollect(ctx, p.live(r.SessionID), &r, host)
}

// syncAndCollect has sb copy the session's files back (sync), then collects them, one session's at a time.
func (p *Pool) syncAndCollect(ctx context.Context, sb Sandbox, r *Recipe, host HostDirs) error {
	mu, _ := p.collecting.LoadOrStore(r.SessionID, new(sync.Mutex))
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	p.sync(ctx, sb, r, host)
	return p.cfg.Outputs.Collect(ctx, r, host)
}

// sync has sb copy the session's files back into host if it is a Syncer (a sandbox of a Provider with
// StagedWorkspace); a failure is logged, and what is collected is then what was copied back before.
func (p *Pool) sync(ctx context.Context, sb Sandbox, r *Recipe, host HostDirs) {
	s := syncer(sb)
	if s == nil {
		return
	}
	if err := s.Sync(ctx, r, host); err != nil {
		p.cfg.Logger.Warn("session outputs not copied back from the sandbox", "session", r.SessionID, "err", err)
	}
}

// syncer is sb as a Syncer, under the Pool's own wrappers (quota, image); nil if it is none.
func syncer(sb Sandbox) Syncer {
	for sb != nil {
		if s, ok := sb.(Syncer); ok {
			return s
		}
		u, ok := sb.(interface{ Unwrap() Sandbox })
		if !ok {
			return nil
		}
		sb = u.Unwrap()
	}
	return nil
}

// live is the session's sandbox, if it has one.
func (p *Pool) live(sessionID string) Sandbox {
	p.mu.Lock()
	s := p.sessions[sessionID]
	p.mu.Unlock()
	if s == nil {
		return nil
	}
	sb, _, _ := s.last()
	return sb
}

// Close closes the session's sandbox, if any. The workspace stays. Idempotent.
func (p *Pool) Close(sessionID string) error {
	p.mu.Lock()
	s := p.sessions[sessionID]
	delete(p.sessions, sessionID)
	p.mu.Unlock()
	if s == nil {
		return nil
	}
	return s.close()
}

// RemoveWorkspaces deletes the workspaces of the sessions that gone reports as gone (and has the Placer forget
// them), closing any sandbox they still have, and returns how many it removed. A session gone cannot answer for
// is left alone. Workspaces outlive sandboxes on purpose; this is how a deleted session's files go. A Provider
// whose sessions have no directories here has none here; if it keeps workspaces where its sandboxes run (a
// WorkspaceKeeper), they are removed through it (with StagedWorkspace, both go; a session counts once).
func (p *Pool) RemoveWorkspaces(ctx context.Context, gone func(ctx context.Context, sessionID string) (bool, error)) (int, error) {
	removed := map[string]bool{}
	var errs []error
	if p.cfg.Provider.Capabilities().KeepsHostDirs() {
		errs = append(errs, p.removeHostDirs(ctx, gone, removed))
	}
	if k, ok := p.cfg.Provider.(WorkspaceKeeper); ok {
		errs = append(errs, p.removeKept(ctx, k, gone, removed))
	}
	return len(removed), errors.Join(errs...)
}

// removeHostDirs removes the workspaces and session directories under WorkspaceRoot of the sessions that gone
// reports as gone, adding their ids to removed.
func (p *Pool) removeHostDirs(ctx context.Context, gone func(ctx context.Context, sessionID string) (bool, error), removed map[string]bool) error {
	entries, err := os.ReadDir(p.cfg.WorkspaceRoot)
	if err != nil {
		return fmt.Errorf("sandbox pool: workspaces: %w", err)
	}
	var errs []error
	for _, e := range entries {
		id := e.Name()
		if !e.IsDir() || validSessionID(id) != nil || strings.HasPrefix(id, ".") {
			continue
		}
		if ok, err := gone(ctx, id); err != nil || !ok {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, p.Close(id))
		dir := filepath.Join(p.cfg.WorkspaceRoot, id)
		if p.cfg.Volumes != nil {
			if err := errors.Join(p.cfg.Volumes.Remove(dir), p.cfg.Volumes.Remove(p.sessionDir(id))); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("sandbox pool: remove workspace: %w", err))
			continue
		}
		if err := os.RemoveAll(p.sessionDir(id)); err != nil {
			errs = append(errs, fmt.Errorf("sandbox pool: remove session directory: %w", err))
			continue
		}
		if p.cfg.Placer != nil {
			errs = append(errs, p.cfg.Placer.Forget(dir))
		}
		p.collecting.Delete(id)
		removed[id] = true
	}
	return errors.Join(errs...)
}

// removeKept removes the workspaces a WorkspaceKeeper keeps for sessions that gone reports as gone, adding their
// ids to removed.
func (p *Pool) removeKept(ctx context.Context, k WorkspaceKeeper, gone func(ctx context.Context, sessionID string) (bool, error), removed map[string]bool) error {
	ids, err := k.Workspaces(ctx)
	if err != nil {
		return fmt.Errorf("sandbox pool: workspaces: %w", err)
	}
	var errs []error
	for _, id := range ids {
		if ok, err := gone(ctx, id); err != nil || !ok {
			errs = append(errs, err)
			continue
		}
		if err := errors.Join(p.Close(id), k.RemoveWorkspace(ctx, id)); err != nil {
			errs = append(errs, err)
			continue
		}
		removed[id] = true
	}
	return errors.Join(errs...)
}

func (s *session) close() error {
	s.mu.Lock()
	sb, detach := s.sb, s.detach
	s.sb, s.detach = nil, nil
	s.removed = true
	s.mu.Unlock()
	var err error
	if sb != nil {
		err = sb.Close()
	}
	if detach != nil {
		// After the sandbox: its processes no longer use the workspace.
		err = errors.Join(err, detach())
	}
	return err
}

// Stop closes every sandbox, detaches the workspaces' volumes (and closes Volumes if it has a Close method), and
// waits for the reaper. Idempotent; Execute fails with ErrPoolStopped afterwards.
func (p *Pool) Stop() error {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return nil
	}
	p.stopped = true
	sessions := p.sessions
	p.sessions = map[string]*session{}
	p.mu.Unlock()
	close(p.stop)
	p.reaped.Wait()
	var errs []error
	for _, s := range sessions {
		p.collect(s.last())
		errs = append(errs, s.close())
	}
	// Every session detached its volume; a Volumes that can be closed unmounts whatever is left.
	if c, ok := p.cfg.Volumes.(interface{ Close() error }); ok {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// last is the session's sandbox, with its recipe and host directories; nil if it has none.
func (s *session) last() (Sandbox, *Recipe, HostDirs) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sb == nil {
		return nil, nil, HostDirs{}
	}
	return s.sb, s.recipe, s.host
}

// Sessions returns the number of sessions that hold a slot (a sandbox or one being provisioned).
func (p *Pool) Sessions() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.sessions)
}
