// Package server assembles one Corral server from its parts: the HTTP API, the brains and the sandbox pool over
// a given store. `corral serve`, `corral harness` and `corral bench` all run this one assembly, so the benchmark
// measures what ships: the same HTTP timeouts, brain settings, workspace sweeper and shutdown order.
//
// The server picks no backend: the caller (cmd/corral) opens the store and constructs the sandbox provider.
package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/console"
	"github.com/corralhq/corral/internal/files"
	"github.com/corralhq/corral/internal/harness"
	"github.com/corralhq/corral/internal/maintain"
	"github.com/corralhq/corral/internal/metrics"
	"github.com/corralhq/corral/internal/price"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/tunnel"
	"github.com/corralhq/corral/internal/webhook"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of Config.
const (
	// DefaultSweepInterval is how often the workspaces of deleted sessions are removed and expired files deleted.
	DefaultSweepInterval = 10 * time.Minute
	// DefaultShutdownTimeout bounds the wait for in-flight requests in Stop.
	DefaultShutdownTimeout = 20 * time.Second
	// DefaultListen is the address the API serves on.
	DefaultListen = "127.0.0.1:8080"
)

// HTTP server timeouts (the same for every server this package builds).
const (
	ReadHeaderTimeout = 10 * time.Second
	ReadTimeout       = time.Minute // a slow body cannot hold a handler forever
	WriteTimeout      = time.Minute // streams set their own per-write deadlines
	IdleTimeout       = 2 * time.Minute
)

// Config configures a Server. Zero fields take the defaults documented on them.
type Config struct {
	// Store is the store the API and the brains share. Required. The server does not close it.
	Store  store.Store
	Logger *slog.Logger // default: discard
	// API serves the HTTP API; nil runs no API (corral harness).
	API *APIConfig
	// Brain runs brains in this process; nil runs none (serve --brains 0: the API alone, for brains in other
	// processes). Its Store, Logger and Hands are set by the server.
	Brain *harness.Config
	// Sandbox configures the hands of the brains.
	Sandbox SandboxConfig
	// Metrics, if set, receives the measurements of the API, the brains and the sandbox pool.
	Metrics *metrics.Registry
	// TracerProvider, if set, traces the API's requests and the brains' runs, model requests, tool calls and
	// sandbox provisioning (cmd/corral builds it from the OTEL_* environment).
	TracerProvider trace.TracerProvider
	// Images, if set, builds the cloud environments' images (internal/image): the API shows their status and
	// starts their builds, and the pool runs each sandbox on its environment's image, waiting for its build.
	// Start starts it (the base is built in the background) and Stop stops it. Nil: sandboxes run on the
	// host's layout and packages are stored only.
	Images Images
	// Fleet configures the fleet's unattended work, which runs on the one process of the fleet that holds the
	// store's leader lease (internal/maintain): deployments' schedules and runs, dreams, webhook deliveries. Nil:
	// with an API, the API's sealer and files and the defaults; without, none of it runs in this process.
	Fleet *FleetConfig
	// MetricsListen, if set (with Metrics), is the TCP address on which Metrics are served at /metrics, apart
	// from the API: the endpoint has no authentication, so it is meant for a private address.
	MetricsListen string
}

// Images is the environments' image builds as the server runs them (*image.Service, image.HostLayout).
type Images interface {
	api.Images
	sandbox.Images
	Start(ctx context.Context) error
	Stop()
}

// APIConfig configures the HTTP API of a Server.
type APIConfig struct {
	// Listen is the TCP address to serve on (default DefaultListen; port 0 picks a free one).
	Listen string
	// Keys authenticates requests. Required.
	Keys      api.Authenticator
	RateLimit float64 // requests per second per API key (0 = unlimited)
	// Shares are each workspace's fair shares of the server (zero values: no limits).
	Shares api.Shares
	// Sealer seals the credentials the API is given (*vault.Vault); nil refuses to store credentials.
	Sealer api.Sealer
	// Validator validates MCP credentials (the MCP proxy); nil: mcp_oauth_validate says it cannot.
	Validator api.CredentialValidator
	// WorkLeaseTTL is the default lease of a self-hosted worker on a work item (api.Config.WorkLeaseTTL).
	WorkLeaseTTL time.Duration
	// Files stores the Files API's files; nil answers its endpoints with an error.
	Files *files.Service
	// Prices are the list prices budgets need (api.Config.Prices); nil: price.Default().
	Prices *price.Table
	// GitRelay serves the git relay of the sessions' repositories (api.Config.GitRelay, *proxy.Git); nil: the
	// relay answers that this server has none.
	GitRelay api.GitRelay
	// WebSearch names the brains' search provider (api.Config.WebSearch); "" none.
	WebSearch string
	// Tunnels is the hub of the tunnels' connectors of this process's MCP proxy: they connect at
	// tunnel.ConnectPath, the API allocates tunnels' domains under its base domain and drops a tunnel's
	// connectors when its token is rotated or it is archived. nil: tunnels get domains under
	// apitype.DefaultTunnelDomain and no connector connects here.
	Tunnels *tunnel.Hub
	// ShutdownTimeout bounds Stop's wait for in-flight requests (default DefaultShutdownTimeout); open streams
	// are cut at once.
	ShutdownTimeout time.Duration
}

// FleetConfig configures the fleet's unattended work (Config.Fleet).
type FleetConfig struct {
	// Sealer seals deployments' repository tokens anew for their sessions and opens webhook signing secrets
	// (*vault.Vault); Files resolves deployments' file rubrics. With an API, the API's own serve too.
	Sealer api.Sealer
	Files  *files.Service
	// DreamTimeout (api.Config.DreamTimeout) and DeploymentCatchUp (api.Config.DeploymentCatchUp).
	DreamTimeout      time.Duration
	DeploymentCatchUp time.Duration
	// Webhooks configures the deliveries' HTTP client: its AllowInternal are the operator's
	// --egress-allow-internal pairs, the only internal addresses an endpoint may have.
	Webhooks webhook.SenderConfig
	// WebhookRetryPeriod is how long a delivery is retried before it is given up and its endpoint disabled
	// (default webhook.DefaultRetryPeriod).
	WebhookRetryPeriod time.Duration
}

// SandboxConfig configures the hands: a pool of sandboxes of one provider.
type SandboxConfig struct {
	// Provider provisions the sandboxes; nil runs no sandbox. The server closes it on Stop if it is an
	// io.Closer.
	Provider sandbox.Provider
	// Unavailable, when Provider is nil, says why the configured backend cannot run here (e.g. "bubblewrap is
	// not installed: apt-get install bubblewrap"): every built-in tool call then gets an error result saying so.
	// Empty with no Provider means no backend was configured.
	Unavailable string
	// Tools are the built-in tools offered to the model when Provider is nil (the backend's, agent.Tools()):
	// each call then gets the error result that says why they cannot run.
	Tools []sandbox.Tool
	// Pool configures the pool; its Provider and Logger are set by the server. Pool.WorkspaceRoot is required
	// with a Provider whose sandboxes have their workspaces on this host (Capabilities.HostWorkspace).
	Pool sandbox.PoolConfig
	// WorkspaceSandboxes is how many of a workspace's sessions may hold a live sandbox at once, across every
	// brain of the store; a tool call beyond it fails with the reason (0 = unlimited).
	WorkspaceSandboxes int
	// SweepInterval is how often the workspaces of deleted sessions are removed, and expired files deleted,
	// the first time at Start (default DefaultSweepInterval).
	SweepInterval time.Duration
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Fleet == nil && c.API != nil {
		c.Fleet = &FleetConfig{Sealer: c.API.Sealer, Files: c.API.Files}
	}
	if c.API != nil {
		a := *c.API
		a.Listen = cmp.Or(a.Listen, DefaultListen)
		a.ShutdownTimeout = cmp.Or(a.ShutdownTimeout, DefaultShutdownTimeout)
		c.API = &a
	}
	c.Sandbox.SweepInterval = cmp.Or(c.Sandbox.SweepInterval, DefaultSweepInterval)
}

func (c *Config) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("server: Config.Store is required")
	case c.API == nil && c.Brain == nil:
		return errors.New("server: Config needs an API, brains, or both")
	case c.API != nil && c.API.Keys == nil:
		return errors.New("server: Config.API.Keys is required")
	case c.MetricsListen != "" && c.Metrics == nil:
		return errors.New("server: Config.MetricsListen needs Config.Metrics")
	case c.Sandbox.SweepInterval < 0:
		return errors.New("server: Config.Sandbox.SweepInterval must not be negative")
	}
	return nil
}

// Server is one assembled server. New builds it, Start runs it, Stop stops it.
type Server struct {
	cfg   Config
	pool  *sandbox.Pool
	brain *harness.Brain
	http  *http.Server
	// metricsHTTP serves /metrics on MetricsListen (nil without).
	metricsHTTP *http.Server
	metricsAddr net.Addr
	// fleet runs the periodic jobs of the whole fleet under the store's leader lease (expired files); local
	// those on this machine's disk, in every process (the workspaces of deleted sessions).
	fleet, local *maintain.Runner
	// api is the HTTP API's server (nil without an API). jobs runs the fleet's unattended work (nil without
	// Config.Fleet): the API's server, or one that serves nothing; webhooks delivers the outbox.
	api      *api.Server
	jobs     *api.Server
	webhooks *webhook.Dispatcher
	// services are the parts that run, in start order (stopped in reverse).
	services *services

	cancelStreams context.CancelFunc

	mu       sync.Mutex
	started  bool
	stopped  bool
	addr     net.Addr
	serveErr chan error
	stopOnce sync.Once
}

// New validates cfg and builds the server's parts; nothing runs until Start.
func New(cfg Config) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, serveErr: make(chan error, 1)}
	var hands sandbox.Hands
	backend := "none"
	switch sc := cfg.Sandbox; {
	case sc.Provider != nil:
		pc := sc.Pool
		pc.Provider = sc.Provider
		pc.Logger = cmp.Or(pc.Logger, cfg.Logger)
		if pc.Images == nil {
			pc.Images = cfg.Images // a nil Images stays nil: no images
		}
		if n := sc.WorkspaceSandboxes; n > 0 && pc.Quota == nil {
			pc.Quota = &workspaceSandboxes{store: cfg.Store, max: n, log: cfg.Logger}
		}
		pool, err := sandbox.NewPool(pc)
		if err != nil {
			closeProvider(sc.Provider)
			return nil, fmt.Errorf("server: %w", err)
		}
		s.pool, hands = pool, pool
		backend = sc.Provider.Name()
		if cfg.Metrics != nil {
			cfg.Metrics.SandboxesLive(backend, pool.Sessions)
		}
	case sc.Unavailable != "":
		backend = "unavailable"
		hands = sandbox.Unavailable(sc.Tools, fmt.Sprintf("Built-in tools cannot run on this server: its sandbox backend is unavailable (%s).", sc.Unavailable))
	default:
		hands = sandbox.Unavailable(sc.Tools, "Built-in tools cannot run on this server: no sandbox backend is configured (--sandbox none).")
	}
	if cfg.Metrics != nil {
		st := cfg.Store
		cfg.Metrics.StoreCounts(func(ctx context.Context) (map[string]int, int, error) {
			c, err := st.Stats(ctx)
			if err != nil {
				return nil, 0, err
			}
			return c.Sessions, c.WorkQueued, nil
		})
		if co, ok := st.(store.CommitsObserved); ok {
			co.ObserveCommits(cfg.Metrics.Commits())
		}
	}
	// undo releases what was built when a later part fails: nothing runs yet.
	undo := func(err error) (*Server, error) {
		if s.pool != nil {
			_ = s.pool.Stop()
		}
		closeProvider(cfg.Sandbox.Provider)
		return nil, fmt.Errorf("server: %w", err)
	}
	if cfg.Brain != nil {
		hc := *cfg.Brain
		hc.Store, hc.Logger, hc.Hands = cfg.Store, cfg.Logger, hands
		if cfg.TracerProvider != nil {
			hc.TracerProvider = cfg.TracerProvider
		}
		if cfg.Metrics != nil {
			hc.Metrics = cfg.Metrics.Brain(backend)
		}
		brain, err := harness.New(hc)
		if err != nil {
			return undo(err)
		}
		s.brain = brain
	}
	var fleet FleetConfig
	if cfg.Fleet != nil {
		fleet = *cfg.Fleet
	}
	if cfg.API != nil {
		acfg := api.Config{Store: cfg.Store, Logger: cfg.Logger, Keys: cfg.API.Keys, RateLimit: cfg.API.RateLimit, Shares: cfg.API.Shares, Sealer: cfg.API.Sealer,
			Validator: cfg.API.Validator, WorkLeaseTTL: cfg.API.WorkLeaseTTL, Files: cfg.API.Files, Metrics: apiMetrics(cfg.Metrics),
			TracerProvider: cfg.TracerProvider, Images: cfg.Images, Prices: cfg.API.Prices, GitRelay: cfg.API.GitRelay, WebSearch: cfg.API.WebSearch,
			DreamTimeout: fleet.DreamTimeout, DeploymentCatchUp: fleet.DeploymentCatchUp}
		if t := cfg.API.Tunnels; t != nil {
			acfg.Tunnels, acfg.TunnelDomain = t, t.Domain()
		}
		a, err := api.New(acfg)
		if err != nil {
			return undo(err)
		}
		s.api = a
		con, err := console.New()
		if err != nil {
			return undo(err)
		}
		// The console's files beside the API: its pages call the API like any other client.
		mux := http.NewServeMux()
		mux.Handle(console.Prefix, con)
		mux.Handle(console.Prefix+"/", con)
		mux.Handle("/", a.Handler())
		if cfg.API.Tunnels != nil {
			mux.Handle(tunnel.ConnectPath, cfg.API.Tunnels)
		}
		// Streams end when the server shuts down; ordinary requests finish first.
		baseCtx, cancel := context.WithCancel(context.Background())
		s.cancelStreams = cancel
		s.http = &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: ReadHeaderTimeout,
			ReadTimeout:       ReadTimeout,
			WriteTimeout:      WriteTimeout,
			IdleTimeout:       IdleTimeout,
			BaseContext:       func(net.Listener) context.Context { return baseCtx },
			ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
		}
		s.http.RegisterOnShutdown(cancel)
	}
	if cfg.MetricsListen != "" {
		mmux := http.NewServeMux()
		mmux.Handle("GET /metrics", cfg.Metrics.Handler())
		s.metricsHTTP = &http.Server{Handler: mmux, ReadHeaderTimeout: ReadHeaderTimeout, ReadTimeout: ReadTimeout,
			WriteTimeout: WriteTimeout, IdleTimeout: IdleTimeout, ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)}
	}
	if err := s.fleetJobs(); err != nil {
		return undo(err)
	}
	if err := s.periodic(); err != nil {
		return undo(err)
	}
	s.services = &services{list: s.serviceList()}
	return s, nil
}

// apiMetrics is the API's view of m (nil: none).
func apiMetrics(m *metrics.Registry) api.Metrics {
	if m == nil {
		return nil
	}
	return m.API()
}

// Start starts the server's services in order: the image builds, the sandbox pool, the brains, the periodic
// jobs, the metrics listener and the API listener. The brains run until Stop is called or ctx is done. On
// error, whatever started is stopped again, in reverse, and the server is stopped.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.stopped {
		return errors.New("server: already started")
	}
	s.started = true
	if err := s.services.Start(ctx); err != nil {
		s.stopLocked()
		return fmt.Errorf("server: %w", err)
	}
	return nil
}

// serviceList is the server's services in start order. Stop stops them in reverse: the API stops accepting
// first, and the images stop last, once no sandbox waits for a build.
func (s *Server) serviceList() []service {
	var list []service
	if s.cfg.Images != nil {
		// The base (and the stored environments' images) build in the background: nobody waits for them
		// but a sandbox that needs them.
		list = append(list, namedService{name: "images",
			start: func(ctx context.Context) error { return s.cfg.Images.Start(context.WithoutCancel(ctx)) },
			stop:  s.cfg.Images.Stop})
	}
	if s.pool != nil {
		// The pool's reaper runs until the pool's Stop; the brains' calls stop before it.
		list = append(list, namedService{
			start: func(ctx context.Context) error { return s.pool.Start(context.WithoutCancel(ctx)) },
			stop:  func() { _ = s.pool.Stop() }})
	}
	if s.brain != nil {
		// The brains finish their appends and release their leases on Stop.
		list = append(list, namedService{start: s.brain.Start, stop: s.brain.Stop})
	}
	for _, r := range []*maintain.Runner{s.fleet, s.local} {
		if r.Jobs() > 0 {
			stop := r.Stop
			if r == s.fleet && s.webhooks != nil {
				// The deliveries in flight end with the jobs' context: wait for them to record what they can.
				stop = func() { r.Stop(); s.webhooks.Wait() }
			}
			list = append(list, namedService{name: "periodic jobs", start: r.Start, stop: stop})
		}
	}
	if s.metricsHTTP != nil {
		list = append(list, s.metricsService())
	}
	if s.http != nil {
		list = append(list, s.apiService())
	}
	return list
}

// metricsService serves /metrics on MetricsListen.
func (s *Server) metricsService() service {
	var wg sync.WaitGroup
	return namedService{name: "metrics",
		start: func(context.Context) error {
			ln, err := net.Listen("tcp", s.cfg.MetricsListen)
			if err != nil {
				return err
			}
			s.metricsAddr = ln.Addr()
			wg.Go(func() {
				if err := s.metricsHTTP.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
					s.cfg.Logger.Error("metrics listener failed", "err", err)
				}
			})
			return nil
		},
		stop: func() {
			_ = s.metricsHTTP.Close()
			wg.Wait()
		}}
}

// apiService serves the API on APIConfig.Listen. Its Stop stops accepting, cuts the open streams and lets
// in-flight requests finish (up to APIConfig.ShutdownTimeout).
func (s *Server) apiService() service {
	var wg sync.WaitGroup
	return namedService{
		start: func(context.Context) error {
			ln, err := net.Listen("tcp", s.cfg.API.Listen)
			if err != nil {
				return err
			}
			s.addr = ln.Addr()
			wg.Go(func() {
				if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
					s.serveErr <- err
				}
			})
			return nil
		},
		stop: func() {
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.API.ShutdownTimeout)
			if err := s.http.Shutdown(ctx); err != nil {
				s.cfg.Logger.Warn("http shutdown", "err", err)
				_ = s.http.Close()
			}
			cancel()
			s.cancelStreams()
			wg.Wait()
		}}
}

// Addr is the address the API listens on (nil before Start or without an API).
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// URL is the API's base URL, e.g. http://127.0.0.1:8080 ("" before Start or without an API).
func (s *Server) URL() string {
	if a := s.Addr(); a != nil {
		return "http://" + a.String()
	}
	return ""
}

// MetricsURL is the URL of /metrics ("" before Start or without MetricsListen).
func (s *Server) MetricsURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.metricsAddr == nil {
		return ""
	}
	return "http://" + s.metricsAddr.String() + "/metrics"
}

// Failed delivers the error that ended the API's serving before Stop (the listener failed).
func (s *Server) Failed() <-chan error { return s.serveErr }

// Pool is the server's sandbox pool, or nil when it runs no sandbox.
func (s *Server) Pool() *sandbox.Pool { return s.pool }

// Stop stops the server's services in reverse order: the API stops accepting, open streams are cut and
// in-flight requests finish (up to APIConfig.ShutdownTimeout); then the metrics listener, the periodic jobs
// (the leader lease is released), the brains (which finish their appends and release their leases), the
// sandboxes, the image builds and the provider. It returns once every goroutine of the server has exited.
// Idempotent; the store stays open.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
}

func (s *Server) stopLocked() {
	s.stopOnce.Do(func() {
		s.stopped = true
		s.services.Stop()
		if s.cancelStreams != nil {
			s.cancelStreams() // a server that never served
		}
		if s.pool != nil {
			_ = s.pool.Stop() // a pool that never started: its volumes
		}
		closeProvider(s.cfg.Sandbox.Provider)
	})
}

// fleetJobs builds what runs the fleet's unattended work (Config.Fleet): the API's server, or one of its own
// that serves nothing in a process without an API, and the webhook dispatcher.
func (s *Server) fleetJobs() error {
	f := s.cfg.Fleet
	if f == nil {
		return nil
	}
	s.jobs = s.api
	if s.jobs == nil {
		j, err := api.New(api.Config{Store: s.cfg.Store, Logger: s.cfg.Logger, Sealer: f.Sealer, Files: f.Files,
			DreamTimeout: f.DreamTimeout, DeploymentCatchUp: f.DeploymentCatchUp})
		if err != nil {
			return err
		}
		s.jobs = j
	}
	d, err := webhook.NewDispatcher(webhook.DispatcherConfig{Store: s.cfg.Store, Sender: webhook.NewSender(f.Webhooks),
		Open: s.jobs.OpenWebhookSecret, RetryPeriod: f.WebhookRetryPeriod, Logger: s.cfg.Logger})
	if err != nil {
		return err
	}
	s.webhooks = d
	return nil
}

// periodic registers the server's periodic jobs, each every SweepInterval and the first time at Start: the
// deletion of expired files on the fleet's leader (the files are the store's), the removal of deleted
// sessions' workspaces in every process (each machine has its own).
func (s *Server) periodic() error {
	var err error
	if s.fleet, err = maintain.New(maintain.Config{Store: s.cfg.Store, Logger: s.cfg.Logger}); err != nil {
		return err
	}
	if s.local, err = maintain.New(maintain.Config{Logger: s.cfg.Logger}); err != nil {
		return err
	}
	every := s.cfg.Sandbox.SweepInterval
	if s.cfg.API != nil && s.cfg.API.Files != nil {
		files := s.cfg.API.Files
		s.fleet.Add("expired files", every, s.logged("expired files deleted", func(ctx context.Context) (int, error) {
			return files.SweepExpired(ctx, apitype.Now())
		}))
	}
	if s.jobs != nil {
		// Dreams and deployments are driven on the leader only: a dream's session is made once and followed
		// by one runner; a deployment's time is claimed in the store (exactly once whoever leads).
		s.fleet.Add("dreams", api.DreamPollInterval, s.jobs.RunDreams)
		s.fleet.Add("deployments", api.DeploymentPollInterval, s.jobs.RunDeployments)
		s.fleet.Add("webhooks", webhook.PollInterval, s.webhooks.Pass)
	}
	if s.pool != nil {
		gone := func(ctx context.Context, id string) (bool, error) {
			_, err := s.cfg.Store.SessionGet(ctx, id)
			if errors.Is(err, store.ErrNotFound) {
				return true, nil
			}
			return false, err
		}
		s.local.Add("workspaces of deleted sessions", every, s.logged("workspaces of deleted sessions removed", func(ctx context.Context) (int, error) {
			return s.pool.RemoveWorkspaces(ctx, gone)
		}))
	}
	return nil
}

// logged adapts a sweep that counts what it removed to a job, logging msg with the count when it removed
// something.
func (s *Server) logged(msg string, sweep func(context.Context) (int, error)) func(context.Context) error {
	return func(ctx context.Context) error {
		n, err := sweep(ctx)
		if n > 0 {
			s.cfg.Logger.Info(msg, "count", n)
		}
		return err
	}
}

func closeProvider(p sandbox.Provider) {
	if c, ok := p.(io.Closer); ok {
		_ = c.Close()
	}
}
