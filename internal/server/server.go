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
	"github.com/corralhq/corral/internal/metrics"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/store"
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
	// Sealer seals the credentials the API is given (*vault.Vault); nil refuses to store credentials.
	Sealer api.Sealer
	// Validator validates MCP credentials (the MCP proxy); nil: mcp_oauth_validate says it cannot.
	Validator api.CredentialValidator
	// WorkLeaseTTL is the default lease of a self-hosted worker on a work item (api.Config.WorkLeaseTTL).
	WorkLeaseTTL time.Duration
	// Files stores the Files API's files; nil answers its endpoints with an error.
	Files *files.Service
	// ShutdownTimeout bounds Stop's wait for in-flight requests (default DefaultShutdownTimeout); open streams
	// are cut at once.
	ShutdownTimeout time.Duration
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
	// with a Provider.
	Pool sandbox.PoolConfig
	// SweepInterval is how often the workspaces of deleted sessions are removed, and expired files deleted,
	// the first time at Start (default DefaultSweepInterval).
	SweepInterval time.Duration
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
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

	cancelStreams context.CancelFunc

	mu       sync.Mutex
	started  bool
	stopped  bool
	addr     net.Addr
	serveErr chan error
	stopOnce sync.Once
	stopCtx  context.CancelFunc // ends the sweeper
	wg       sync.WaitGroup
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
	if cfg.API != nil {
		a, err := api.New(api.Config{Store: cfg.Store, Logger: cfg.Logger, Keys: cfg.API.Keys, RateLimit: cfg.API.RateLimit, Sealer: cfg.API.Sealer,
			Validator: cfg.API.Validator, WorkLeaseTTL: cfg.API.WorkLeaseTTL, Files: cfg.API.Files, Metrics: apiMetrics(cfg.Metrics),
			TracerProvider: cfg.TracerProvider, Images: cfg.Images})
		if err != nil {
			return undo(err)
		}
		con, err := console.New()
		if err != nil {
			return undo(err)
		}
		// The console's files beside the API: its pages call the API like any other client.
		mux := http.NewServeMux()
		mux.Handle(console.Prefix, con)
		mux.Handle(console.Prefix+"/", con)
		mux.Handle("/", a.Handler())
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
	return s, nil
}

// apiMetrics is the API's view of m (nil: none).
func apiMetrics(m *metrics.Registry) api.Metrics {
	if m == nil {
		return nil
	}
	return m.API()
}

// Start starts the brains, the workspace sweeper and the API listener. The brains run until Stop is called or
// ctx is done. On error, whatever started is stopped again.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.stopped {
		return errors.New("server: already started")
	}
	s.started = true
	var ln net.Listener
	if s.http != nil {
		var err error
		if ln, err = net.Listen("tcp", s.cfg.API.Listen); err != nil {
			s.stopLocked()
			return fmt.Errorf("server: %w", err)
		}
		s.addr = ln.Addr()
	}
	var mln net.Listener
	if s.metricsHTTP != nil {
		var err error
		if mln, err = net.Listen("tcp", s.cfg.MetricsListen); err != nil {
			if ln != nil {
				ln.Close()
			}
			s.stopLocked()
			return fmt.Errorf("server: metrics: %w", err)
		}
		s.metricsAddr = mln.Addr()
		s.wg.Go(func() {
			if err := s.metricsHTTP.Serve(mln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.cfg.Logger.Error("metrics listener failed", "err", err)
			}
		})
	}
	if s.cfg.Images != nil {
		// The base (and the stored environments' images) build in the background: nobody waits for them
		// but a sandbox that needs them.
		if err := s.cfg.Images.Start(context.WithoutCancel(ctx)); err != nil {
			if ln != nil {
				ln.Close()
			}
			s.stopLocked()
			return fmt.Errorf("server: images: %w", err)
		}
	}
	if s.brain != nil {
		if err := s.brain.Start(ctx); err != nil {
			if ln != nil {
				ln.Close()
			}
			s.stopLocked()
			return fmt.Errorf("server: %w", err)
		}
	}
	sweepCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.stopCtx = cancel
	if s.pool != nil {
		// The pool's reaper runs until the pool's Stop, which stopLocked calls.
		if err := s.pool.Start(context.WithoutCancel(ctx)); err != nil {
			cancel()
			if ln != nil {
				ln.Close()
			}
			s.stopLocked()
			return fmt.Errorf("server: %w", err)
		}
		s.wg.Go(func() { s.sweep(sweepCtx) })
	}
	if s.cfg.API != nil && s.cfg.API.Files != nil {
		s.wg.Go(func() { s.sweepFiles(sweepCtx) })
	}
	if ln != nil {
		s.wg.Go(func() {
			if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.serveErr <- err
			}
		})
	}
	return nil
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

// Stop stops the server in order: the API stops accepting, open streams are cut and in-flight requests finish
// (up to APIConfig.ShutdownTimeout); then the sweeper, the brains (which finish their appends and release
// their leases), the sandboxes and the provider. It returns once every goroutine of the server has exited.
// Idempotent; the store stays open.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
}

func (s *Server) stopLocked() {
	s.stopOnce.Do(func() {
		s.stopped = true
		if s.http != nil {
			if s.started {
				ctx, cancel := context.WithTimeout(context.Background(), s.cfg.API.ShutdownTimeout)
				if err := s.http.Shutdown(ctx); err != nil {
					s.cfg.Logger.Warn("http shutdown", "err", err)
					_ = s.http.Close()
				}
				cancel()
			}
			s.cancelStreams()
		}
		if s.stopCtx != nil {
			s.stopCtx()
		}
		if s.metricsHTTP != nil {
			_ = s.metricsHTTP.Close()
		}
		s.wg.Wait()
		if s.brain != nil {
			s.brain.Stop()
		}
		if s.pool != nil {
			_ = s.pool.Stop()
		}
		if s.cfg.Images != nil && s.started {
			s.cfg.Images.Stop() // after the pool: no sandbox waits for a build any more
		}
		closeProvider(s.cfg.Sandbox.Provider)
	})
}

// sweep removes, now and every SweepInterval, the local workspaces of sessions the store no longer has (deleted
// through the API), until ctx ends.
func (s *Server) sweep(ctx context.Context) {
	gone := func(ctx context.Context, id string) (bool, error) {
		_, err := s.cfg.Store.SessionGet(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return true, nil
		}
		return false, err
	}
	s.every(ctx, "workspaces of deleted sessions removed", func(ctx context.Context) (int, error) {
		return s.pool.RemoveWorkspaces(ctx, gone)
	})
}

// sweepFiles deletes, now and every SweepInterval, the files whose expires_at has passed (their bytes and
// metadata), until ctx ends.
func (s *Server) sweepFiles(ctx context.Context) {
	s.every(ctx, "expired files deleted", func(ctx context.Context) (int, error) {
		return s.cfg.API.Files.SweepExpired(ctx, apitype.Now())
	})
}

// every runs job now and every SweepInterval until ctx ends, logging msg with what it removed or its error.
func (s *Server) every(ctx context.Context, msg string, job func(context.Context) (int, error)) {
	t := time.NewTicker(s.cfg.Sandbox.SweepInterval)
	defer t.Stop()
	for {
		n, err := job(ctx)
		if n > 0 || (err != nil && ctx.Err() == nil) {
			s.cfg.Logger.Info(msg, "count", n, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func closeProvider(p sandbox.Provider) {
	if c, ok := p.(io.Closer); ok {
		_ = c.Close()
	}
}
