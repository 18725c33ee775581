// Package metrics is the one package that speaks Prometheus: it implements the small Metrics interfaces the
// brain (harness.Metrics) and the API (api.Metrics) declare, and serves what they recorded at /metrics. The
// packages it measures import neither it nor the client library; internal/server wires it in.
//
// Every metric is named corral_*; durations are in seconds. Labels are bounded: backends come from the
// backends table, kinds and statuses from fixed vocabularies, and models and tool names, which API clients
// (agents' configurations) and MCP servers choose, are kept to the first MaxLabelValues distinct values each;
// later ones are counted under "other", so no client can grow the registry without bound.
package metrics

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MaxLabelValues is how many distinct models, and tool names, the metrics label; the others are "other".
const MaxLabelValues = 100

// bounded maps label values to themselves, up to MaxLabelValues distinct ones, and the rest to "other".
type bounded struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (b *bounded) value(v string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen[v] {
		return v
	}
	if len(b.seen) >= MaxLabelValues {
		return "other"
	}
	if b.seen == nil {
		b.seen = map[string]bool{}
	}
	b.seen[v] = true
	return v
}

// Registry holds a server's metrics. Its methods are safe for concurrent use.
type Registry struct {
	models, tools bounded

	reg          *prometheus.Registry
	statuses     *prometheus.CounterVec
	turns        prometheus.Counter
	modelLatency *prometheus.HistogramVec
	modelErrors  *prometheus.CounterVec
	tokens       *prometheus.CounterVec
	toolLatency  *prometheus.HistogramVec
	provisioning *prometheus.HistogramVec
	appends      *prometheus.HistogramVec
	streams      prometheus.Gauge
	takeovers    prometheus.Counter
	leasesLost   prometheus.Counter
	groupCommits prometheus.Histogram
}

// latencyBuckets span a local append (a millisecond) to a long model answer or tool call (minutes).
var latencyBuckets = prometheus.ExponentialBucketsRange(0.001, 600, 20)

// New returns a registry with every Corral metric and the Go runtime and process collectors.
func New() *Registry {
	r := &Registry{reg: prometheus.NewRegistry()}
	r.statuses = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "corral_session_status_transitions_total",
		Help: "Session status changes written by the brains, by the status entered (running, idle, rescheduling, terminated)."}, []string{"status"})
	r.turns = prometheus.NewCounter(prometheus.CounterOpts{Name: "corral_turns_total",
		Help: "Session turns started (a session announced running to answer client events)."})
	r.modelLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "corral_model_request_duration_seconds",
		Help: "Model requests, streaming included, by model and outcome (ok or error).", Buckets: latencyBuckets}, []string{"model", "outcome"})
	r.modelErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "corral_model_request_errors_total",
		Help: "Failed model requests by model and kind (overloaded, rate_limited, server, invalid, auth, context_too_long, billing, unknown, interrupted)."}, []string{"model", "kind"})
	r.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "corral_model_tokens_total",
		Help: "Tokens reported by the model, by model and type (input, output, cache_creation_input, cache_read_input)."}, []string{"model", "type"})
	r.toolLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "corral_tool_call_duration_seconds",
		Help: "Tool calls run by the brain, by tool, backend (the sandbox backend, or mcp) and outcome (ok or error).", Buckets: latencyBuckets},
		[]string{"tool", "backend", "outcome"})
	r.provisioning = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "corral_sandbox_provision_duration_seconds",
		Help: "Sandbox provisioning by backend and outcome (ok or error).", Buckets: latencyBuckets}, []string{"backend", "outcome"})
	r.appends = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "corral_store_append_duration_seconds",
		Help: "Durable appends to session logs, by writer (brain or api) and outcome (ok or error).", Buckets: latencyBuckets},
		[]string{"writer", "outcome"})
	r.streams = prometheus.NewGauge(prometheus.GaugeOpts{Name: "corral_stream_subscribers",
		Help: "Event streams (SSE) open on this server."})
	r.takeovers = prometheus.NewCounter(prometheus.CounterOpts{Name: "corral_lease_takeovers_total",
		Help: "Sessions this server's brains claimed with a turn in progress: another brain had died or lost its lease mid-turn."})
	r.leasesLost = prometheus.NewCounter(prometheus.CounterOpts{Name: "corral_leases_lost_total",
		Help: "Sessions this server's brains stopped working because another brain took their lease over."})
	r.groupCommits = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "corral_store_group_commit_size",
		Help: "Writes (appends and other writes) the store's batcher committed together in one transaction.", Buckets: prometheus.ExponentialBuckets(1, 2, 10)})
	r.reg.MustRegister(r.statuses, r.turns, r.modelLatency, r.modelErrors, r.tokens, r.toolLatency, r.provisioning,
		r.appends, r.streams, r.takeovers, r.leasesLost, r.groupCommits,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Handler serves the metrics in the Prometheus exposition formats.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{Registry: r.reg})
}

// SandboxesLive registers a gauge of the sandboxes of backend that are live or being provisioned, read from
// live at each scrape. A registry serves one server: a second pool of the same backend is not counted.
func (r *Registry) SandboxesLive(backend string, live func() int) {
	_ = r.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "corral_sandboxes_live",
		Help: "Sessions holding a slot of the sandbox pool (a live sandbox, or one being provisioned or replaced), by backend.", ConstLabels: prometheus.Labels{"backend": backend}},
		func() float64 { return float64(live()) }))
}

func outcome(failed bool) string {
	if failed {
		return "error"
	}
	return "ok"
}

// Brain is the harness.Metrics of the brains of one server, whose built-in tools run on one sandbox backend.
type Brain struct {
	r       *Registry
	backend string
}

// Brain returns the metrics of brains whose hands run on backend (a name of the backends table, or "none").
func (r *Registry) Brain(backend string) *Brain { return &Brain{r: r, backend: backend} }

// Turn counts a turn started.
func (b *Brain) Turn() { b.r.turns.Inc() }

// Status counts a status change.
func (b *Brain) Status(status string) { b.r.statuses.WithLabelValues(status).Inc() }

// ModelRequest records one model request; errKind is "" on success.
func (b *Brain) ModelRequest(model string, d time.Duration, errKind string, input, output, cacheCreation, cacheRead int64) {
	model = b.r.models.value(model)
	b.r.modelLatency.WithLabelValues(model, outcome(errKind != "")).Observe(d.Seconds())
	if errKind != "" {
		b.r.modelErrors.WithLabelValues(model, errKind).Inc()
	}
	for typ, n := range map[string]int64{"input": input, "output": output, "cache_creation_input": cacheCreation, "cache_read_input": cacheRead} {
		if n > 0 {
			b.r.tokens.WithLabelValues(model, typ).Add(float64(n))
		}
	}
}

// ToolCall records one tool call; route is "hands" (the sandbox backend's built-in tools) or another route
// name (mcp), which labels it instead of the backend.
func (b *Brain) ToolCall(tool, route string, d time.Duration, isError bool) {
	backend := route
	if route == "hands" {
		backend = b.backend
	}
	b.r.toolLatency.WithLabelValues(b.r.tools.value(tool), backend, outcome(isError)).Observe(d.Seconds())
}

// Provisioned records one sandbox provisioning.
func (b *Brain) Provisioned(backend string, d time.Duration, err error) {
	b.r.provisioning.WithLabelValues(backend, outcome(err != nil)).Observe(d.Seconds())
}

// StoreAppend records one append of the brain.
func (b *Brain) StoreAppend(d time.Duration, err error) {
	b.r.appends.WithLabelValues("brain", outcome(err != nil)).Observe(d.Seconds())
}

// LeaseTakeover counts a session claimed with a turn in progress.
func (b *Brain) LeaseTakeover() { b.r.takeovers.Inc() }

// LeaseLost counts a session whose lease another brain took.
func (b *Brain) LeaseLost() { b.r.leasesLost.Inc() }

// API is the api.Metrics of one server's HTTP API.
type API struct{ r *Registry }

// API returns the metrics of the HTTP API.
func (r *Registry) API() *API { return &API{r: r} }

// Streams adds delta to the open event streams.
func (a *API) Streams(delta int) { a.r.streams.Add(float64(delta)) }

// StoreAppend records one append of client events.
func (a *API) StoreAppend(d time.Duration, err error) {
	a.r.appends.WithLabelValues("api", outcome(err != nil)).Observe(d.Seconds())
}

// Commits is the store's CommitObserver: it records the size of each group commit of the store's write batcher.
type Commits struct{ h prometheus.Histogram }

// Commits returns the observer of the store's group commits.
func (r *Registry) Commits() *Commits { return &Commits{h: r.groupCommits} }

// GroupCommit records one group commit of n writes.
func (c *Commits) GroupCommit(n int) { c.h.Observe(float64(n)) }

// StoreCounts registers the gauges read from the store at each scrape: the sessions by status and the work
// items queued for self-hosted workers. counts is called once per scrape with a bounded context; a scrape
// whose counts fail leaves the gauges out.
func (r *Registry) StoreCounts(counts func(ctx context.Context) (sessions map[string]int, workQueued int, err error)) {
	_ = r.reg.Register(&storeCollector{counts: counts})
}

var (
	sessionsDesc = prometheus.NewDesc("corral_sessions",
		"Sessions in the store by status (idle, running, rescheduling, terminated), archived ones left out; read at each scrape.", []string{"status"}, nil)
	workQueueDesc = prometheus.NewDesc("corral_work_queue_depth",
		"Work items of self-hosted environments queued and not yet delivered to a worker; read at each scrape.", nil, nil)
)

// storeCollector reads the store's counts at each scrape.
type storeCollector struct {
	counts func(ctx context.Context) (map[string]int, int, error)
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sessionsDesc
	ch <- workQueueDesc
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sessions, queued, err := c.counts(ctx)
	if err != nil {
		return
	}
	for _, status := range []string{"idle", "running", "rescheduling", "terminated"} {
		ch <- prometheus.MustNewConstMetric(sessionsDesc, prometheus.GaugeValue, float64(sessions[status]), status)
	}
	ch <- prometheus.MustNewConstMetric(workQueueDesc, prometheus.GaugeValue, float64(queued))
}
