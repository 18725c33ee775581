package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/harness"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/model/anthropic"
	"github.com/corralhq/corral/internal/model/openai"
	"github.com/corralhq/corral/internal/price"
	"github.com/corralhq/corral/internal/webfetch/httpfetch"
	"github.com/corralhq/corral/internal/websearch"
	"github.com/corralhq/corral/internal/websearch/searxng"
)

// Defaults of the brain flags are the harness's own, declared once there: serve and harness show them, and
// corral bench runs its servers with them, so that it measures what ships.
const (
	defaultLeaseTTL      = harness.DefaultLeaseTTL
	defaultPollInterval  = harness.DefaultPollInterval
	defaultContextTokens = harness.DefaultContextTokens
	defaultMaxTokens     = harness.DefaultMaxTokens
	defaultModelTimeout  = harness.DefaultModelTimeout
	defaultModelRetries  = harness.DefaultMaxRetries
	defaultTailCacheMiB  = harness.DefaultTailCacheBytes >> 20
)

// brainFlags configure the brains of serve and harness.
type brainFlags struct {
	workers        int
	leaseTTL       time.Duration
	pollInterval   time.Duration
	contextTokens  int
	maxTokens      int
	thinkingBudget int
	maxRetries     int
	modelTimeout   time.Duration
	eagerHands     bool
	pricesFile     string
	graderModel    string
	webSearch      string
	tailCacheMiB   int64
}

func (f *brainFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.workers, "brains", defaultWorkers(), "how many sessions this process works at once (serve: 0 runs the API alone, for brains in corral harness processes)")
	fs.DurationVar(&f.leaseTTL, "lease-ttl", defaultLeaseTTL, "how long a brain's claim on a session lasts without renewal; another brain resumes the session after it")
	fs.DurationVar(&f.pollInterval, "poll", defaultPollInterval, "how often brains look for work when no wake-up arrives")
	fs.IntVar(&f.contextTokens, "context-tokens", defaultContextTokens, "the model's context window; history is compacted past 80% of it")
	fs.IntVar(&f.maxTokens, "max-tokens", defaultMaxTokens, "max_tokens of each model request")
	fs.IntVar(&f.thinkingBudget, "thinking-budget", 0, "extended thinking budget in tokens (0 = off)")
	fs.DurationVar(&f.modelTimeout, "model-timeout", defaultModelTimeout, "longest one model call may take, streaming included; a stalled call is retried")
	fs.IntVar(&f.maxRetries, "model-retries", defaultModelRetries, "retries of a failed model call before the session idles with retries_exhausted")
	fs.StringVar(&f.pricesFile, "prices", envOr("CORRAL_PRICES", ""), "JSON `file` of list prices for models the built-in table (Anthropic's Claude models) does not name, or to replace its rates: {\"models\": {\"<model id>\": {\"input\": \"2.50\", \"output\": \"10\", \"cache_read\": \"1.25\"}}} in US dollars per million tokens; a budgeted session needs a priced model (env CORRAL_PRICES)")
	fs.StringVar(&f.graderModel, "grader-model", envOr("CORRAL_GRADER_MODEL", ""), "the `model` that grades outcomes (user.define_outcome) in a context window of its own, routed like an agent's model (\"openai/<model>\" included); empty: each session's agent model (env CORRAL_GRADER_MODEL)")
	fs.StringVar(&f.webSearch, "web-search", envOr("CORRAL_WEB_SEARCH", ""), "how the agents' web_search tool runs: \"searxng=https://host\" (a SearXNG instance with json in search.formats), searched from the brain's process under the egress rules (--egress-allow-internal for one on an internal address), for every model; or \"anthropic\": Anthropic's own server tool, for Claude models on the Anthropic API only (always_allow policies only); empty: web_search is left out of the model's tools (env CORRAL_WEB_SEARCH)")
	fs.Int64Var(&f.tailCacheMiB, "tail-cache", defaultTailCacheMiB, "MiB of the logs of long sessions (over 200 events since their last compaction) a brain keeps after a turn, so that its next turn on one reads only the events appended since; 0 keeps none")
	fs.BoolVar(&f.eagerHands, "eager-hands", false, "advanced, for comparison only (corral bench): provision each session's sandbox before its first model call, as a coupled design does")
}

// config is the brains' config without the parts the server sets (Store, Hands, Logger) and the model.
func (f *brainFlags) config() harness.Config {
	return harness.Config{
		Workers:        f.workers,
		LeaseTTL:       f.leaseTTL,
		PollInterval:   f.pollInterval,
		ContextTokens:  f.contextTokens,
		MaxTokens:      f.maxTokens,
		ModelTimeout:   f.modelTimeout,
		ThinkingBudget: f.thinkingBudget,
		Retry:          harness.RetryPolicy{MaxRetries: retries(f.maxRetries)},
		EagerHands:     f.eagerHands,
		GraderModel:    f.graderModel,
		TailCacheBytes: tailCacheBytes(f.tailCacheMiB),
	}
}

// tailCacheBytes is --tail-cache in bytes for the harness (which reads 0 as its default, negative as none).
func tailCacheBytes(mib int64) int64 {
	if mib <= 0 {
		return -1
	}
	return mib << 20
}

// defaultBrainConfig is the brains' config with every flag at its default: what corral bench's servers run.
func defaultBrainConfig() harness.Config {
	f := brainFlags{leaseTTL: defaultLeaseTTL, pollInterval: defaultPollInterval, contextTokens: defaultContextTokens,
		maxTokens: defaultMaxTokens, modelTimeout: defaultModelTimeout, maxRetries: defaultModelRetries, workers: defaultWorkers(),
		tailCacheMiB: defaultTailCacheMiB}
	return f.config()
}

// newModel routes model ids to providers: "openai/<model>" to an OpenAI-compatible endpoint (OPENAI_BASE_URL,
// OPENAI_API_KEY, OPENAI_ORG_ID, OPENAI_PROJECT_ID), everything else to the Anthropic Messages API
// (ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN). The command reads the environment, under the
// names the official SDKs use; the adapters read none.
func newModel() (model.Model, error) {
	return model.NewMux(model.MuxConfig{
		Default: anthropic.New(anthropic.Config{
			APIKey:    os.Getenv("ANTHROPIC_API_KEY"),
			AuthToken: os.Getenv("ANTHROPIC_AUTH_TOKEN"),
			BaseURL:   os.Getenv("ANTHROPIC_BASE_URL"),
		}),
		Routes: map[string]model.Model{"openai": openai.New(openai.Config{
			APIKey:       os.Getenv("OPENAI_API_KEY"),
			BaseURL:      os.Getenv("OPENAI_BASE_URL"),
			Organization: os.Getenv("OPENAI_ORG_ID"),
			Project:      os.Getenv("OPENAI_PROJECT_ID"),
		})},
	})
}

// brainConfig is the flags' brain config with the model and the prices.
func (f *brainFlags) brainConfig() (*harness.Config, error) {
	m, err := newModel()
	if err != nil {
		return nil, err
	}
	cfg := f.config()
	cfg.Model = m
	if cfg.Prices, err = f.prices(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// searcher is the --web-search provider, its connections under the egress flags eo (nil without the flag).
func (f *brainFlags) searcher(eo *egressOptions) (websearch.Searcher, error) {
	if f.webSearch == "" || f.webSearch == webSearchAnthropic {
		return nil, nil
	}
	kind, base, _ := strings.Cut(f.webSearch, "=")
	if strings.TrimSpace(kind) != "searxng" {
		return nil, fmt.Errorf("--web-search: unknown provider %q (want searxng=URL or anthropic)", kind)
	}
	s, err := searxng.New(searxng.Config{BaseURL: base, AllowInternal: eo.AllowInternal, RootCAs: eo.RootCAs})
	if err != nil {
		return nil, fmt.Errorf("--web-search: %w", err)
	}
	return s, nil
}

// webSearchName names the --web-search provider for the API ("" none): with --brains 0, serve's API says
// whether the brains of corral harness search, so both take the same --web-search.
func (f *brainFlags) webSearchName() string {
	kind, _, _ := strings.Cut(f.webSearch, "=")
	return strings.TrimSpace(kind)
}

// webSearchAnthropic is the --web-search value that passes web_search to Claude models as Anthropic's own
// server tool.
const webSearchAnthropic = "anthropic"

// setWebTools gives the brain its web tools, which it runs in its own process under the environments'
// networking and the operator's --egress-allow-internal and --egress-ca-file, as the proxies do: web_fetch's
// fetcher, and web_search's provider or Anthropic's server tool (--web-search); it says at start what
// web_search is.
func (f *brainFlags) setWebTools(io *stdio, cfg *harness.Config, hf *handsFlags) error {
	eo, err := hf.egress.parse()
	if err != nil {
		return err
	}
	cfg.WebFetch = httpfetch.New(httpfetch.Config{AllowInternal: eo.AllowInternal, RootCAs: eo.RootCAs})
	s, err := f.searcher(eo)
	if err != nil {
		return err
	}
	cfg.WebSearch, cfg.WebSearchServer = s, f.webSearch == webSearchAnthropic
	fmt.Fprintln(io.err, webSearchNote(cfg))
	return nil
}

// webSearchNote is what serve and harness print about web_search at start.
func webSearchNote(cfg *harness.Config) string {
	s := cfg.WebSearch
	if cfg.WebSearchServer {
		return "corral: web_search is Anthropic's server tool for Claude models (--web-search anthropic); other models are not offered it"
	}
	if s == nil {
		return "corral: no search provider (--web-search): the agents' web_search tool is left out of the model's tools"
	}
	return "corral: web_search runs through " + s.Name()
}

// prices is the built-in price table with the --prices file's entries.
func (f *brainFlags) prices() (*price.Table, error) {
	if f.pricesFile == "" {
		return price.Default(), nil
	}
	return price.Load(f.pricesFile)
}

// retries maps the flag (0 = no retries) to harness.RetryPolicy.MaxRetries (0 = the default, negative = none).
func retries(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}
