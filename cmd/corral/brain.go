package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/harness"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/model/anthropic"
	"github.com/corralhq/corral/internal/model/openai"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/agent"
	"github.com/corralhq/corral/internal/store"
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
}

func (f *brainFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.workers, "brains", defaultWorkers(), "how many sessions this process works at once (serve: 0 runs the API alone, for brains in corral harness processes)")
	fs.DurationVar(&f.leaseTTL, "lease-ttl", 5*time.Second, "how long a brain's claim on a session lasts without renewal; another brain resumes the session after it")
	fs.DurationVar(&f.pollInterval, "poll", time.Second, "how often brains look for work when no wake-up arrives")
	fs.IntVar(&f.contextTokens, "context-tokens", 200000, "the model's context window; history is compacted past 80% of it")
	fs.IntVar(&f.maxTokens, "max-tokens", 8192, "max_tokens of each model request")
	fs.IntVar(&f.thinkingBudget, "thinking-budget", 0, "extended thinking budget in tokens (0 = off)")
	fs.DurationVar(&f.modelTimeout, "model-timeout", 10*time.Minute, "longest one model call may take, streaming included; a stalled call is retried")
	fs.IntVar(&f.maxRetries, "model-retries", 5, "retries of a failed model call before the session idles with retries_exhausted")
	fs.BoolVar(&f.eagerHands, "eager-hands", false, "advanced, for comparison only (corral bench): provision each session's sandbox before its first model call, as a coupled design does")
}

// config builds the brain's config. hands may be nil: built-in tools then get an error result.
func (f *brainFlags) config(st store.Store, hands *sandbox.Pool, logger *slog.Logger) (harness.Config, error) {
	m, err := newModel()
	if err != nil {
		return harness.Config{}, err
	}
	cfg := harness.Config{
		Store:          st,
		Model:          m,
		Logger:         logger,
		Workers:        f.workers,
		LeaseTTL:       f.leaseTTL,
		PollInterval:   f.pollInterval,
		ContextTokens:  f.contextTokens,
		MaxTokens:      f.maxTokens,
		ModelTimeout:   f.modelTimeout,
		ThinkingBudget: f.thinkingBudget,
		Retry:          harness.RetryPolicy{MaxRetries: retries(f.maxRetries)},
		EagerHands:     f.eagerHands,
	}
	if hands != nil {
		cfg.Hands = hands
	} else {
		// The model is still offered the built-in tools, and each call's result says why they cannot run.
		cfg.Hands = sandbox.Unavailable(agent.Tools(), "no sandbox is configured on this server, so built-in tools cannot run")
	}
	return cfg, nil
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

// startBrains builds the hands and starts the brains; stop stops the brains (finishing in-flight appends and
// releasing their leases), then the sandboxes.
func startBrains(ctx context.Context, bf *brainFlags, hf *handsFlags, dataDir string, st store.Store, logger *slog.Logger) (stop func(), err error) {
	hands, err := hf.build(dataDir, logger)
	if err != nil {
		return nil, err
	}
	stopHands := func() {
		if hands != nil {
			_ = hands.Stop()
		}
	}
	cfg, err := bf.config(st, hands, logger)
	if err != nil {
		stopHands()
		return nil, err
	}
	brain, err := harness.New(cfg)
	if err != nil {
		stopHands()
		return nil, err
	}
	if err := brain.Start(ctx); err != nil {
		stopHands()
		return nil, err
	}
	sweepCtx, stopSweep := context.WithCancel(ctx)
	var sweeper sync.WaitGroup
	if hands != nil {
		sweeper.Go(func() { sweepWorkspaces(sweepCtx, hands, st, logger) })
	}
	return func() {
		stopSweep()
		sweeper.Wait()
		brain.Stop()
		stopHands()
	}, nil
}

// workspaceSweep is how often the workspaces of deleted sessions are removed.
const workspaceSweep = 10 * time.Minute

// sweepWorkspaces removes, now and every workspaceSweep, the local workspaces of sessions the store no longer
// has (deleted through the API), until ctx ends.
func sweepWorkspaces(ctx context.Context, hands *sandbox.Pool, st store.Store, logger *slog.Logger) {
	gone := func(ctx context.Context, id string) (bool, error) {
		_, err := st.SessionGet(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return true, nil
		}
		return false, err
	}
	t := time.NewTicker(workspaceSweep)
	defer t.Stop()
	for {
		n, err := hands.RemoveWorkspaces(ctx, gone)
		if n > 0 || err != nil {
			logger.Info("workspaces of deleted sessions removed", "count", n, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// retries maps the flag (0 = no retries) to harness.RetryPolicy.MaxRetries (0 = the default, negative = none).
func retries(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}
