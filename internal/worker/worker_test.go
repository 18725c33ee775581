package worker

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/client"
	"github.com/corralhq/corral/internal/sandbox"
)

// stubProvider provisions nothing: enough for a pool the tests never run a call in.
type stubProvider struct{}

func (stubProvider) Name() string                       { return "stub" }
func (stubProvider) Capabilities() sandbox.Capabilities { return sandbox.Local }
func (stubProvider) Tools() []sandbox.Tool {
	return []sandbox.Tool{{Name: "bash", InputSchema: json.RawMessage(`{"type":"object"}`)}}
}
func (stubProvider) Provision(context.Context, *sandbox.Recipe, sandbox.HostDirs) (sandbox.Sandbox, error) {
	return nil, errors.New("stub: no sandboxes")
}

func newClient(t *testing.T, h http.Handler) *client.Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := client.New(client.Config{BaseURL: srv.URL, APIKey: "envkey"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	c := newClient(t, http.NotFoundHandler())
	pool := sandbox.PoolConfig{Provider: stubProvider{}, WorkspaceRoot: t.TempDir()}
	for name, cfg := range map[string]Config{
		"no client":      {Environment: "env_1", Pool: pool},
		"no environment": {Client: c, Pool: pool},
		"no provider":    {Client: c, Environment: "env_1", Pool: sandbox.PoolConfig{WorkspaceRoot: t.TempDir()}},
		"negative idle":  {Client: c, Environment: "env_1", Pool: pool, Idle: -time.Second},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
	w, err := New(Config{Client: c, Environment: "env_1", Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(w.ID(), "-") || w.w.idle != DefaultIdle {
		t.Errorf("defaults: id %q, idle %s", w.ID(), w.w.idle)
	}
}

// TestRunRefusedKey: a server that refuses the environment key (401) ends Run with the poll's error, after one
// poll that carried the worker's id; a server that fails (503) is retried instead, until ctx ends (nil).
func TestRunRefusedKey(t *testing.T) {
	t.Parallel()
	var polls atomic.Int64
	var workerID atomic.Value
	c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/v1/environments/env_1/work/poll") {
			http.NotFound(w, r)
			return
		}
		polls.Add(1)
		workerID.Store(r.Header.Get("Anthropic-Worker-ID"))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"type":"error","error":{"type":"authentication_error","message":"bad key"}}`))
	}))
	w, err := New(Config{Client: c, Environment: "env_1", ID: "w-1",
		Pool: sandbox.PoolConfig{Provider: stubProvider{}, WorkspaceRoot: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = w.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "poll") {
		t.Fatalf("Run: %v, want the poll's error", err)
	}
	if polls.Load() != 1 || workerID.Load() != "w-1" {
		t.Errorf("polls %d, worker id %v", polls.Load(), workerID.Load())
	}
}

func TestRunRetriesUntilCancelled(t *testing.T) {
	t.Parallel()
	var polls atomic.Int64
	c := newClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		polls.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	w, err := New(Config{Client: c, Environment: "env_1",
		Pool: sandbox.PoolConfig{Provider: stubProvider{}, WorkspaceRoot: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	for end := time.Now().Add(10 * time.Second); polls.Load() < 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("no poll")
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after cancel: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}
