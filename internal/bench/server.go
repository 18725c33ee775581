package bench

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/harness"
	"github.com/corralhq/corral/internal/model"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/sandbox/agent"
	"github.com/corralhq/corral/internal/store"
)

// Key is the API key of the benchmark's in-process servers.
const Key = "corral-bench-key"

// ServerConfig configures an in-process server built from the same packages as `corral serve`.
type ServerConfig struct {
	Store store.Store
	Model model.Model
	// Hands, if set, runs built-in tools (the server does not stop it).
	Hands *sandbox.Pool
	// EagerHands is the coupled mode: each session's sandbox is provisioned and ready before its first model
	// call (harness.Config.EagerHands).
	EagerHands bool
	// NoBrain serves the API only: user events are logged and nothing answers them.
	NoBrain      bool
	Workers      int
	LeaseTTL     time.Duration
	PollInterval time.Duration
	Logger       *slog.Logger
}

// Server is a running in-process server on a real TCP listener on 127.0.0.1.
type Server struct {
	URL   string
	brain *harness.Brain
	http  *http.Server
	done  chan struct{}
}

// StartServer starts the API on 127.0.0.1 and, unless NoBrain, the brains.
func StartServer(ctx context.Context, cfg ServerConfig) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{done: make(chan struct{})}
	if !cfg.NoBrain {
		hc := harness.Config{
			Store: cfg.Store, Model: cfg.Model, Logger: cfg.Logger, Workers: cfg.Workers,
			LeaseTTL: cfg.LeaseTTL, PollInterval: cfg.PollInterval, EagerHands: cfg.EagerHands,
			Retry: harness.RetryPolicy{MaxRetries: 2, BaseDelay: 50 * time.Millisecond, MaxDelay: time.Second},
		}
		if cfg.Hands != nil {
			hc.Hands = cfg.Hands
		} else {
			// As corral serve without a sandbox: the model is offered the built-in tools, which fail.
			hc.Hands = sandbox.Unavailable(agent.Tools(), "no sandbox is configured on this server, so built-in tools cannot run")
		}
		brain, err := harness.New(hc)
		if err != nil {
			return nil, err
		}
		s.brain = brain
		if err := s.brain.Start(context.WithoutCancel(ctx)); err != nil {
			return nil, err
		}
	}
	srv := api.New(api.Config{Store: cfg.Store, Logger: cfg.Logger, Keys: &api.KeyAuth{Static: Key}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.stopBrain()
		return nil, err
	}
	s.URL = "http://" + ln.Addr().String()
	s.http = &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.done)
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			cfg.Logger.Error("bench server", "err", err)
		}
	}()
	return s, nil
}

func (s *Server) stopBrain() {
	if s.brain != nil {
		s.brain.Stop()
	}
}

// Close stops the server: open streams are cut, then the brains stop.
func (s *Server) Close() {
	_ = s.http.Close()
	<-s.done
	s.stopBrain()
}

// Client returns a client of this server.
func (s *Server) Client() *Client { return NewClient(s.URL, Key) }
