// Package api is Corral's HTTP API: the Managed Agents endpoints (agents, environments, sessions, session events
// and resources, the SSE event stream, vaults and credentials), wire-compatible with Anthropic's Claude Managed
// Agents API so that the official SDKs work against Corral by changing only the base URL.
//
// It owns authentication, request validation, pagination, the mapping of errors to the Anthropic error envelope
// and SSE framing. It only writes client events to the store and reads the log; it never calls the brain.
package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	gopath "path"
	"sync"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/files"
	"github.com/corralhq/corral/internal/price"
	"github.com/corralhq/corral/internal/store"
)

// Defaults for Config.
const (
	DefaultMaxBodyBytes       = 8 << 20
	DefaultHeartbeatInterval  = 15 * time.Second
	DefaultPollInterval       = time.Second
	DefaultMaxStreams         = 4096
	DefaultMaxStreamsPerKey   = 2048
	DefaultStreamWriteTimeout = time.Minute
	DefaultWorkLeaseTTL       = 30 * time.Second
)

// DefaultMaxSessionOutputBytes is the quota of a session's outputs uploaded with a sessions token: the quota of
// the outputs a server's hands collect (workspace.DefaultMaxOutputBytes).
const DefaultMaxSessionOutputBytes = 1 << 30

// Config configures the API server.
type Config struct {
	// Store holds every resource and the session logs. Required.
	Store store.Store
	// Logger receives request failures; nil discards.
	Logger *slog.Logger
	// Keys authenticates API keys. Nil means KeyAuth{Store: Store}: only keys kept in the store.
	Keys Authenticator
	// MaxBodyBytes caps request bodies (413 beyond it). Default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// HeartbeatInterval is how often an idle SSE stream gets a ": ping" comment. Default 15s.
	HeartbeatInterval time.Duration
	// PollInterval is how often SSE streams re-read the log when the store cannot notify across processes.
	// Default 1s.
	PollInterval time.Duration
	// MaxStreams caps the event streams open at once on the server, MaxStreamsPerKey those of one API key;
	// beyond either a stream request is answered 429. Each stream holds a bounded number of bytes (see
	// streamPageBytes), so these bound the memory all streams hold together. Defaults DefaultMaxStreams and
	// DefaultMaxStreamsPerKey.
	MaxStreams, MaxStreamsPerKey int
	// StreamWriteTimeout bounds each write to an event stream: a client that reads nothing for that long is
	// disconnected, and resumes with Last-Event-ID. Default DefaultStreamWriteTimeout.
	StreamWriteTimeout time.Duration
	// RateLimit is the sustained number of requests per second allowed per API key; 0 disables rate limiting.
	RateLimit float64
	// RateBurst is the token bucket size per key. Default max(1, 2*RateLimit).
	RateBurst int
	// Shares are each workspace's fair shares (shares.go); zero values are no limits.
	Shares Shares
	// WorkLeaseTTL is the lease a self-hosted worker gets on a work item by its ack, and by a heartbeat that asks
	// for no other (desired_ttl_seconds): a worker silent for that long loses the item. Default
	// DefaultWorkLeaseTTL.
	WorkLeaseTTL time.Duration
	// Sealer encrypts credential secrets (a *vault.Vault). Without one, creating a credential with a secret
	// fails.
	Sealer Sealer
	// Validator probes MCP credentials for mcp_oauth_validate (the MCP proxy). Without one, the endpoint
	// answers that this server cannot validate credentials.
	Validator CredentialValidator
	// Files stores the Files API's files (and the skills' archives); nil answers those endpoints with an
	// error. Its MaxBytes caps an upload, instead of MaxBodyBytes.
	Files *files.Service
	// MaxSessionOutputBytes bounds what the files scoped to a session may hold together once a sessions token
	// uploads one (a self-hosted worker's outputs); default DefaultMaxSessionOutputBytes.
	MaxSessionOutputBytes int64
	// TracerProvider traces each request (a server span joining the caller's W3C traceparent); nil traces
	// nothing.
	TracerProvider trace.TracerProvider
	// Metrics receives the open event streams and the appends of client events (internal/metrics implements
	// it); nil records nothing.
	Metrics Metrics
	// Images builds the cloud environments' images (internal/image): the API checks an environment's
	// packages, shows its image's status and starts its build when it is created or its packages change. Nil:
	// no image field, and packages are stored only.
	Images Images
	// Prices are the list prices budgets are checked against: a budget for a model without one is refused
	// (model_not_budgetable). Nil: price.Default().
	Prices *price.Table
	// DreamTimeout is how long a dream may run, from its creation, before it fails with a timeout error
	// (default DefaultDreamTimeout; see RunDreams).
	DreamTimeout time.Duration
	// DeploymentCatchUp is how old a scheduled time missed while no server ran may be and still fire when one
	// comes back (default DefaultCatchUp; see RunDeployments).
	DeploymentCatchUp time.Duration
	// GitRelay forwards git's smart HTTP to sessions' repositories with their tokens (internal/proxy's Git):
	// the git relay (/v1/sessions/{id}/resources/{id}/git/...) through which `corral worker` clones and its
	// sandboxes fetch and push with the work item's sessions token. Nil: the relay answers that this server
	// has none.
	GitRelay GitRelay
	// WebSearch names the search provider the brains run web_search with ("" none: an agent create or update
	// enabling web_search is answered with a Warning header saying it is left out of the model's tools).
	WebSearch string
	// TunnelDomain is the operator's base domain of the MCP tunnels: each tunnel gets a domain of its own under
	// it (default apitype.DefaultTunnelDomain).
	TunnelDomain string
	// Tunnels drops a tunnel's connectors once its token is rotated or it is archived (the in-process connector
	// hub); nil calls nothing.
	Tunnels TunnelRevoker
}

// GitRelay is what the API's git relay asks of the git endpoint (*proxy.Git).
type GitRelay interface {
	// Relay forwards one request of git's smart HTTP (op: info/refs, git-upload-pack or git-receive-pack) to
	// the repository of session sessionID's repository resource resourceID, with its token, under the
	// session's networking; it answers the request itself, failures included.
	Relay(w http.ResponseWriter, r *http.Request, sessionID, resourceID, op string, networking *apitype.Networking)
	// Limits bound one relayed request: its body's size and its duration.
	Limits() (maxRequestBytes int64, timeout time.Duration)
}

// Images is what the API asks of the environments' image builds.
type Images interface {
	// Check reports a package spec that cannot be built (a 400 naming it).
	Check(c *apitype.EnvConfig) error
	// Image is the status of the image of config c now (nil for a self-hosted environment); it starts nothing.
	Image(c *apitype.EnvConfig) *apitype.EnvironmentImage
	// Build starts building e's image in the background if it is not built; the result is stored as e's image
	// status.
	Build(e *apitype.Environment)
}

func (c *Config) validate() error {
	if c.Store == nil {
		return errors.New("api: Config.Store is required")
	}
	if c.MaxBodyBytes < 0 || c.HeartbeatInterval < 0 || c.PollInterval < 0 || c.RateLimit < 0 || c.RateBurst < 0 ||
		c.Shares.RequestRate < 0 || c.Shares.RunningSessions < 0 ||
		c.MaxStreams < 0 || c.MaxStreamsPerKey < 0 || c.StreamWriteTimeout < 0 || c.WorkLeaseTTL < 0 ||
		c.DeploymentCatchUp < 0 || c.MaxSessionOutputBytes < 0 {
		return errors.New("api: negative limits in Config")
	}
	if c.TunnelDomain != "" {
		if _, err := checkTunnelDomain(c.TunnelDomain); err != nil {
			return err
		}
	}
	return nil
}

// Server serves the API. It holds no state besides the rate limiter and the count of open event streams;
// every request goes to the store.
type Server struct {
	store     store.Store // a guardedStore (workspaces.go)
	owners    ownerCache
	prices    *price.Table
	log       *slog.Logger
	keys      Authenticator
	maxBody   int64
	heartbeat time.Duration
	poll      time.Duration
	limiter   *rateLimiter
	shares    Shares
	wsLimiter *rateLimiter // the workspaces' request rates, on a store of one process
	// sharedRates: the workspaces' request rates are buckets of the store, which many processes share.
	sharedRates bool
	streams     *streamSlots
	pages       *streamPages // streams share their reads of a page
	// writeTimeout bounds each write to an event stream.
	writeTimeout time.Duration
	sealer       Sealer
	validator    CredentialValidator
	gitRelay     GitRelay
	webSearch    string
	// tunnelDomain is the base domain of the tunnels' domains; tunnels is Config.Tunnels.
	tunnelDomain string
	tunnels      TunnelRevoker
	files        *files.Service
	images       Images
	metrics      Metrics
	tracer       trace.Tracer
	// workTTL is the default lease of a work item; workers tracks who polled lately.
	workTTL time.Duration
	workers *pollers
	// dreamTimeout bounds a dream's run (Config.DreamTimeout).
	dreamTimeout time.Duration
	// catchUp is Config.DeploymentCatchUp.
	catchUp time.Duration
	mux     *http.ServeMux
	// now is the clock; tests may replace it.
	now func() time.Time
	// maxOutputs is Config.MaxSessionOutputBytes.
	maxOutputs int64
	// outputLocks serialise the quota check and record of each session's uploads through a sessions token
	// (outputLock).
	outputLocks [64]sync.Mutex
	// relaySlots bound the git relay's requests at once (resourceGit).
	relaySlots relaySlots
}

// Metrics receives what the API measures. Its methods must be cheap and safe for concurrent use.
type Metrics interface {
	// Streams adds delta to the event streams open.
	Streams(delta int)
	// StoreAppend records one append of client events.
	StoreAppend(d time.Duration, err error)
}

type nopMetrics struct{}

func (nopMetrics) Streams(int)                      {}
func (nopMetrics) StoreAppend(time.Duration, error) {}

// New validates cfg and builds a server from it.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{
		prices:       cfg.Prices,
		log:          cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)),
		keys:         cfg.Keys,
		maxBody:      cmp.Or(cfg.MaxBodyBytes, DefaultMaxBodyBytes),
		maxOutputs:   cmp.Or(cfg.MaxSessionOutputBytes, DefaultMaxSessionOutputBytes),
		heartbeat:    cmp.Or(cfg.HeartbeatInterval, DefaultHeartbeatInterval),
		poll:         cmp.Or(cfg.PollInterval, DefaultPollInterval),
		now:          apitype.Now,
		sealer:       cfg.Sealer,
		validator:    cfg.Validator,
		gitRelay:     cfg.GitRelay,
		webSearch:    cfg.WebSearch,
		tunnels:      cfg.Tunnels,
		files:        cfg.Files,
		dreamTimeout: cmp.Or(cfg.DreamTimeout, DefaultDreamTimeout),
		catchUp:      cmp.Or(cfg.DeploymentCatchUp, DefaultCatchUp),
		images:       cfg.Images,
		metrics:      cfg.Metrics,
		pages:        &streamPages{},
		streams: newStreamSlots(cmp.Or(cfg.MaxStreams, DefaultMaxStreams),
			cmp.Or(cfg.MaxStreamsPerKey, DefaultMaxStreamsPerKey)),
		writeTimeout: cmp.Or(cfg.StreamWriteTimeout, DefaultStreamWriteTimeout),
		workTTL:      max(cmp.Or(cfg.WorkLeaseTTL, DefaultWorkLeaseTTL), time.Second),
		workers:      newPollers(),
	}
	s.store = &guardedStore{Store: cfg.Store, s: s}
	s.tunnelDomain, _ = checkTunnelDomain(cmp.Or(cfg.TunnelDomain, apitype.DefaultTunnelDomain)) // checked by validate
	if s.metrics == nil {
		s.metrics = nopMetrics{}
	}
	if s.prices == nil {
		s.prices = price.Default()
	}
	tp := cfg.TracerProvider
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	s.tracer = tp.Tracer("github.com/corralhq/corral/internal/api")
	if s.keys == nil {
		s.keys = &KeyAuth{Store: cfg.Store}
	}
	if cfg.RateLimit > 0 {
		s.limiter = newRateLimiter(cfg.RateLimit, cmp.Or(cfg.RateBurst, max(1, int(2*cfg.RateLimit))))
	}
	s.shares = cfg.Shares
	if r := cfg.Shares.RequestRate; r > 0 {
		if s.sharedRates = cfg.Store.Capabilities().CrossProcessNotify; !s.sharedRates {
			s.wsLimiter = newRateLimiter(r, max(1, int(2*r)))
		}
	}
	s.mux = http.NewServeMux()
	s.routes()
	return s, nil
}

// Handler returns the HTTP handler of the API.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(s.serveHTTP)
}

// handlerFunc is an endpoint: it writes a response or returns an error, which serveErr maps to the envelope.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

type ctxKey int

const requestIDKey ctxKey = iota

// requestID returns the id the request was given by serveHTTP.
func requestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

// serveHTTP is the outermost layer: it gives every request an id and a request-id header, recovers panics, and
// answers unknown routes with the error envelope.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	id := apitype.NewID(apitype.PrefixRequest)
	w.Header().Set("request-id", id)
	_, pattern := s.mux.Handler(r)
	ctx, span := s.startSpan(r, pattern, id)
	r = r.WithContext(context.WithValue(ctx, requestIDKey, id))
	tw := &trackingWriter{ResponseWriter: w}
	defer func() { endSpan(span, tw.status) }()
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("api: panic", "request_id", id, "method", r.Method, "path", r.URL.Path, "panic", v)
			if !tw.wrote {
				s.serveErr(tw, r, fmt.Errorf("panic: %v", v))
			}
		}
	}()
	// The mux answers a path that is not clean (a "." or ".." segment, a doubled slash) with a 307 to the cleaned
	// path, which keeps the method: a client following it would send DELETE /v1/sessions/{id}/resources/.. to
	// DELETE /v1/sessions/{id}. No id is such a segment, so such a path names no endpoint.
	if p := r.URL.EscapedPath(); r.Method != http.MethodConnect && !cleanPath(p) {
		s.serveErr(tw, r, &apiError{status: http.StatusNotFound, typ: apitype.ErrNotFound,
			msg: fmt.Sprintf("no such endpoint: %s %s (a path has no empty, . or .. segments)", r.Method, r.URL.Path)})
		return
	}
	// No id or parameter holds a NUL or bytes that are not UTF-8, and PostgreSQL stores neither: such a path
	// names nothing, such a query is refused, before they reach the store.
	if p := r.URL.Path; !storableText(p) {
		s.serveErr(tw, r, &apiError{status: http.StatusNotFound, typ: apitype.ErrNotFound,
			msg: fmt.Sprintf("no such endpoint: %s %q (a path is UTF-8 text without NUL)", r.Method, p)})
		return
	}
	if err := checkQueryText(r.URL.RawQuery); err != nil {
		s.serveErr(tw, r, err)
		return
	}
	// The mux's own 404 and 405 answers are plain text; answer unknown routes with the envelope instead.
	if pattern == "" {
		s.serveErr(tw, r, s.noRoute(tw, r))
		return
	}
	s.mux.ServeHTTP(tw, r)
}

// cleanPath says whether p is a path the mux serves as it is: rooted, without empty, "." or ".." segments (a
// trailing slash kept), as http.ServeMux cleans it.
func cleanPath(p string) bool {
	if !strings.HasPrefix(p, "/") {
		return false
	}
	c := gopath.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c == p
}

// storableText says whether s is UTF-8 without NUL: text the store can hold.
func storableText(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// checkQueryText refuses a query whose values are not storable text (a name that is not is no known
// parameter's, and is ignored like any unknown one).
func checkQueryText(raw string) error {
	q, _ := url.ParseQuery(raw) // the handlers read what parses, as url.URL.Query does
	for k, vs := range q {
		for _, v := range vs {
			if !storableText(v) {
				return invalid(k, "must be UTF-8 text without NUL")
			}
		}
	}
	return nil
}

// noRoute is the error for a request no pattern matches: 405 with an Allow header if the path exists for another
// method, else 404.
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request) error {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		return &apiError{status: http.StatusMethodNotAllowed, typ: apitype.ErrInvalidRequest,
			msg: fmt.Sprintf("method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", "))}
	}
	return &apiError{status: http.StatusNotFound, typ: apitype.ErrNotFound,
		msg: fmt.Sprintf("no such endpoint: %s %s", r.Method, r.URL.Path)}
}

// trackingWriter remembers whether a response was started, so a recovered panic does not write twice. It
// passes Flush and deadlines through (SSE needs both).
type trackingWriter struct {
	http.ResponseWriter
	wrote  bool
	status int // the status written (0 until then)
}

func (t *trackingWriter) WriteHeader(code int) {
	if !t.wrote {
		t.status = code
	}
	t.wrote = true
	t.ResponseWriter.WriteHeader(code)
}

func (t *trackingWriter) Write(b []byte) (int, error) {
	if !t.wrote {
		t.status = http.StatusOK
	}
	t.wrote = true
	return t.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (t *trackingWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }
