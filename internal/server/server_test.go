package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/harness"
	"github.com/corralhq/corral/internal/model/anthropic"
	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/server"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
)

const key = "server-test-key"

func openStore(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// start builds and starts a server with the API on a free port and brains calling the fake model.
func start(t *testing.T, st store.Store, fake *modeltest.Server, sc server.SandboxConfig) *server.Server {
	t.Helper()
	srv, err := server.New(server.Config{
		Store: st,
		API:   &server.APIConfig{Listen: "127.0.0.1:0", Keys: &api.KeyAuth{Store: st, Static: key}},
		Brain: &harness.Config{
			Model:        anthropic.New(anthropic.Config{APIKey: "test", BaseURL: fake.URL}),
			Workers:      4,
			PollInterval: 50 * time.Millisecond,
		},
		Sandbox: sc,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

func do(t *testing.T, srv *server.Server, method, path string, body, out any) {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, srv.URL()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-api-key", key)
	req.Header.Set("content-type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %s", method, path, resp.Status)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
}

type event struct {
	Type       string          `json:"type"`
	IsError    bool            `json:"is_error"`
	Content    json.RawMessage `json:"content"`
	StopReason *struct {
		Type string `json:"type"`
	} `json:"stop_reason"`
}

// toolTurn creates a session with the built-in toolset whose first message the model answers with a bash call,
// and returns the session's log once it is idle.
func toolTurn(t *testing.T, srv *server.Server, fake *modeltest.Server) []event {
	t.Helper()
	fake.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"echo hi"}`}}},
		modeltest.Turn{Text: "Done."},
	)
	var agent, env, sess struct{ ID string }
	do(t, srv, "POST", "/v1/agents", map[string]any{"name": "a", "model": "claude-sonnet-4-5",
		"tools": []any{map[string]any{"type": "agent_toolset_20260401"}}}, &agent)
	do(t, srv, "POST", "/v1/environments", map[string]any{"name": "e", "config": map[string]any{"type": "cloud"}}, &env)
	do(t, srv, "POST", "/v1/sessions", map[string]any{"agent": agent.ID, "environment_id": env.ID}, &sess)
	do(t, srv, "POST", "/v1/sessions/"+sess.ID+"/events", map[string]any{"events": []any{map[string]any{
		"type": "user.message", "content": []any{map[string]any{"type": "text", "text": "Run it."}}}}}, nil)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var page struct{ Data []event }
		do(t, srv, "GET", "/v1/sessions/"+sess.ID+"/events?limit=1000", nil, &page)
		if n := len(page.Data); n > 0 && page.Data[n-1].Type == "session.status_idle" {
			return page.Data
		}
		if time.Now().After(deadline) {
			t.Fatalf("session did not go idle: %+v", page.Data)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func toolResult(t *testing.T, events []event) event {
	t.Helper()
	for _, e := range events {
		if e.Type == "agent.tool_result" {
			return e
		}
	}
	t.Fatalf("no tool result in %+v", events)
	return event{}
}

// TestUnavailableSandbox: when the backend cannot run, the tool result says why, as the server log does.
func TestUnavailableSandbox(t *testing.T) {
	t.Parallel()
	const reason = "bubblewrap is not installed: apt-get install bubblewrap"
	fake := modeltest.NewServer(t)
	st := openStore(t)
	srv := start(t, st, fake, server.SandboxConfig{Unavailable: reason, Tools: []sandbox.Tool{{Name: "bash", Description: "Run a command.", InputSchema: json.RawMessage(`{"type":"object"}`)}}})
	if srv.Pool() != nil {
		t.Error("a server without a provider has a pool")
	}
	res := toolResult(t, toolTurn(t, srv, fake))
	if !res.IsError || !strings.Contains(string(res.Content), reason) {
		t.Errorf("tool result = %s (is_error %v), want an error holding %q", res.Content, res.IsError, reason)
	}
	if strings.Contains(string(res.Content), "no sandbox is configured") {
		t.Errorf("tool result says no sandbox is configured: %s", res.Content)
	}
	// The model was told too: the second request carries the reason.
	if reqs := fake.Requests(); len(reqs) != 2 || !strings.Contains(string(reqs[1].Body), "apt-get install bubblewrap") {
		t.Errorf("the model did not get the reason (%d requests)", len(reqs))
	}
}

// stubProvider records provisions and closes, and fails every provision: enough to see the server wire the
// pool, close the provider and sweep.
type stubProvider struct {
	closed chan struct{}
}

func (p *stubProvider) Name() string { return "stub" }

func (p *stubProvider) Capabilities() sandbox.Capabilities { return sandbox.Local }

func (p *stubProvider) Tools() []sandbox.Tool {
	return []sandbox.Tool{{Name: "bash", Description: "Run a command.", InputSchema: json.RawMessage(`{"type":"object"}`)}}
}
func (p *stubProvider) Provision(context.Context, *sandbox.Recipe, sandbox.HostDirs) (sandbox.Sandbox, error) {
	return nil, fmt.Errorf("stub: no sandboxes here")
}
func (p *stubProvider) Close() error { close(p.closed); return nil }

// TestProviderAndStop: a provider becomes the brains' pool; Stop is idempotent, closes the provider and leaves
// the store open; Start after Stop fails.
func TestProviderAndStop(t *testing.T) {
	t.Parallel()
	fake := modeltest.NewServer(t)
	st := openStore(t)
	prov := &stubProvider{closed: make(chan struct{})}
	srv := start(t, st, fake, server.SandboxConfig{Provider: prov, Pool: sandbox.PoolConfig{WorkspaceRoot: t.TempDir()}})
	if srv.Pool() == nil {
		t.Fatal("no pool for a provider")
	}
	res := toolResult(t, toolTurn(t, srv, fake))
	if !res.IsError || !strings.Contains(string(res.Content), "stub: no sandboxes here") {
		t.Errorf("tool result = %s, want the provisioning error", res.Content)
	}
	srv.Stop()
	srv.Stop()
	select {
	case <-prov.closed:
	default:
		t.Error("Stop did not close the provider")
	}
	if _, err := st.APIKeyList(context.Background()); err != nil {
		t.Errorf("store closed by Stop: %v", err)
	}
	if err := srv.Start(context.Background()); err == nil {
		t.Error("Start after Stop succeeded")
	}
	if _, err := http.Get(srv.URL() + "/v1/agents"); err == nil {
		t.Error("the API still answers after Stop")
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	for name, cfg := range map[string]server.Config{
		"no store":       {API: &server.APIConfig{Keys: &api.KeyAuth{Static: key}}},
		"nothing to run": {Store: st},
		"no keys":        {Store: st, API: &server.APIConfig{}},
		"no workspace": {Store: st, API: &server.APIConfig{Keys: &api.KeyAuth{Static: key}},
			Sandbox: server.SandboxConfig{Provider: &stubProvider{closed: make(chan struct{})}}},
	} {
		if _, err := server.New(cfg); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
}

// TestNewFailureClosesTheProvider: when a part refuses its config (here the API's negative rate limit), New
// returns the error and closes the provider it was given.
func TestNewFailureClosesTheProvider(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	prov := &stubProvider{closed: make(chan struct{})}
	_, err := server.New(server.Config{Store: st, API: &server.APIConfig{Keys: &api.KeyAuth{Static: key}, RateLimit: -1},
		Sandbox: server.SandboxConfig{Provider: prov, Pool: sandbox.PoolConfig{WorkspaceRoot: t.TempDir()}}})
	if err == nil {
		t.Fatal("New with a negative rate limit succeeded")
	}
	select {
	case <-prov.closed:
	default:
		t.Error("New failed without closing the provider")
	}
}

// TestHarnessOnly: brains without an API (corral harness) have no address.
func TestHarnessOnly(t *testing.T) {
	t.Parallel()
	fake := modeltest.NewServer(t)
	srv, err := server.New(server.Config{Store: openStore(t), Brain: &harness.Config{Model: anthropic.New(anthropic.Config{APIKey: "x", BaseURL: fake.URL})}})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if srv.Addr() != nil || srv.URL() != "" {
		t.Errorf("a brains-only server has address %v", srv.Addr())
	}
	srv.Stop()
}

// TestSweepAtStart: the workspace of a session the store no longer has is removed when the server starts; a
// live session's stays.
func TestSweepAtStart(t *testing.T) {
	t.Parallel()
	fake := modeltest.NewServer(t)
	st := openStore(t)
	root := t.TempDir()
	gone := filepath.Join(root, "sesn_gone")
	if err := os.MkdirAll(gone, 0o700); err != nil {
		t.Fatal(err)
	}
	srv := start(t, st, fake, server.SandboxConfig{Provider: &stubProvider{closed: make(chan struct{})},
		Pool: sandbox.PoolConfig{WorkspaceRoot: root}})
	var agent, env, sess struct{ ID string }
	do(t, srv, "POST", "/v1/agents", map[string]any{"name": "a", "model": "claude-sonnet-4-5"}, &agent)
	do(t, srv, "POST", "/v1/environments", map[string]any{"name": "e", "config": map[string]any{"type": "cloud"}}, &env)
	do(t, srv, "POST", "/v1/sessions", map[string]any{"agent": agent.ID, "environment_id": env.ID}, &sess)
	waitGone(t, gone)
	srv.Stop()
	// A second server over the same root sweeps again and keeps the live session's workspace.
	live, gone2 := filepath.Join(root, sess.ID), filepath.Join(root, "sesn_gone2")
	for _, dir := range []string{live, gone2} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	start(t, st, fake, server.SandboxConfig{Provider: &stubProvider{closed: make(chan struct{})}, Pool: sandbox.PoolConfig{WorkspaceRoot: root}})
	waitGone(t, gone2)
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a live session's workspace was swept: %v", err)
	}
}

func waitGone(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the workspace %s of a session the store does not have was not swept", dir)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
