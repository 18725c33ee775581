package server_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/harness"
	"github.com/corralhq/corral/internal/metrics"
	"github.com/corralhq/corral/internal/model/anthropic"
	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/sandbox"
	"github.com/corralhq/corral/internal/server"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape reads /metrics over HTTP and parses it with the Prometheus text parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// value is the value of the family's sample whose labels include want (counter, gauge, or a histogram's
// count), summed over the samples that match; -1 when none does.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f, ok := fams[name]
	if !ok {
		return -1
	}
	sum, found := 0.0, false
next:
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	if !found {
		return -1
	}
	return sum
}

// observed starts a server whose brains call the fake model with fast retries and whose sandbox provider (the
// stub) fails every provisioning, configured further by extra; scripts the turn the observability tests run (an
// overloaded model request, a bash call, a final answer; 220 input and 13 output tokens in all); and creates an
// agent "a", an environment and a session for it. The turn starts when the test sends a message.
func observed(t *testing.T, extra func(*server.Config)) (srv *server.Server, agentID, sessionID string) {
	t.Helper()
	fake := modeltest.NewServer(t)
	st := openStore(t)
	cfg := server.Config{
		Store: st,
		API:   &server.APIConfig{Listen: "127.0.0.1:0", Keys: &api.KeyAuth{Store: st, Static: key}},
		Brain: &harness.Config{
			Model:        anthropic.New(anthropic.Config{APIKey: "test", BaseURL: fake.URL}),
			Workers:      2,
			PollInterval: 50 * time.Millisecond,
			Retry:        harness.RetryPolicy{BaseDelay: time.Millisecond, MaxDelay: time.Millisecond},
		},
		Sandbox: server.SandboxConfig{Provider: &stubProvider{closed: make(chan struct{})}, Pool: sandbox.PoolConfig{WorkspaceRoot: t.TempDir()}},
	}
	extra(&cfg)
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	fake.Script(
		modeltest.Turn{Err: modeltest.Overloaded()},
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"echo hi"}`}},
			Usage: modeltest.Usage{InputTokens: 100, OutputTokens: 10}},
		modeltest.Turn{Text: "Done.", Usage: modeltest.Usage{InputTokens: 120, OutputTokens: 3, CacheReadInputTokens: 7}},
	)
	var agent, env, sess struct{ ID string }
	do(t, srv, "POST", "/v1/agents", map[string]any{"name": "a", "model": "claude-sonnet-4-5",
		"tools": []any{map[string]any{"type": "agent_toolset_20260401"}}}, &agent)
	do(t, srv, "POST", "/v1/environments", map[string]any{"name": "e", "config": map[string]any{"type": "cloud"}}, &env)
	do(t, srv, "POST", "/v1/sessions", map[string]any{"agent": agent.ID, "environment_id": env.ID}, &sess)
	return srv, agent.ID, sess.ID
}

// TestMetrics runs a real turn (a retried overloaded model request, a bash call whose sandbox fails to
// provision, a final answer) through the fake model and checks, from /metrics scraped on its own listener and
// parsed, that the counters moved by what happened.
func TestMetrics(t *testing.T) {
	t.Parallel()
	srv, _, sessID := observed(t, func(c *server.Config) { c.Metrics, c.MetricsListen = metrics.New(), "127.0.0.1:0" })
	if srv.MetricsURL() == "" {
		t.Fatal("no metrics URL with MetricsListen set")
	}
	if v := value(scrape(t, srv.MetricsURL()), "corral_turns_total", nil); v != 0 {
		t.Fatalf("corral_turns_total before any turn = %v, want 0", v)
	}

	// An open event stream is a subscriber while it lasts.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", srv.URL()+"/v1/sessions/"+sessID+"/events/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-api-key", key)
	stream, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if stream.StatusCode != http.StatusOK {
		t.Fatalf("stream: %s", stream.Status)
	}
	if v := value(scrape(t, srv.MetricsURL()), "corral_stream_subscribers", nil); v != 1 {
		t.Errorf("corral_stream_subscribers with a stream open = %v, want 1", v)
	}

	do(t, srv, "POST", "/v1/sessions/"+sessID+"/events", map[string]any{"events": []any{map[string]any{
		"type": "user.message", "content": []any{map[string]any{"type": "text", "text": "Run it."}}}}}, nil)
	waitIdle(t, srv, sessID)
	stream.Body.Close()

	// The brain's last append (the idle) is recorded just after it returns: poll the scrape until it shows.
	var fams map[string]*dto.MetricFamily
	deadline := time.Now().Add(30 * time.Second)
	for {
		fams = scrape(t, srv.MetricsURL())
		if value(fams, "corral_session_status_transitions_total", map[string]string{"status": "idle"}) >= 1 &&
			value(fams, "corral_stream_subscribers", nil) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the idle status and the closed stream never showed in /metrics")
		}
		time.Sleep(20 * time.Millisecond)
	}
	const m = "claude-sonnet-4-5"
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"corral_turns_total", nil, 1},
		{"corral_model_request_duration_seconds", map[string]string{"model": m, "outcome": "ok"}, 2},
		{"corral_model_request_duration_seconds", map[string]string{"model": m, "outcome": "error"}, 1},
		{"corral_model_request_errors_total", map[string]string{"model": m, "kind": "overloaded"}, 1},
		{"corral_model_tokens_total", map[string]string{"model": m, "type": "input"}, 220},
		{"corral_model_tokens_total", map[string]string{"model": m, "type": "output"}, 13},
		{"corral_model_tokens_total", map[string]string{"model": m, "type": "cache_read_input"}, 7},
		{"corral_tool_call_duration_seconds", map[string]string{"tool": "bash", "backend": "stub", "outcome": "error"}, 1},
		{"corral_sandbox_provision_duration_seconds", map[string]string{"backend": "stub", "outcome": "error"}, 1},
		{"corral_session_status_transitions_total", map[string]string{"status": "rescheduling"}, 1},
		{"corral_store_append_duration_seconds", map[string]string{"writer": "api", "outcome": "ok"}, 1},
		{"corral_lease_takeovers_total", nil, 0},
		{"corral_stream_subscribers", nil, 0},
		{"corral_sessions", map[string]string{"status": "idle"}, 1},
		{"corral_sessions", map[string]string{"status": "running"}, 0},
		{"corral_work_queue_depth", nil, 0},
	} {
		if got := value(fams, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// Every brain write is an append: the start and end of three model requests, statuses, the provisioning
	// span and the tool result.
	if got := value(fams, "corral_store_append_duration_seconds", map[string]string{"writer": "brain", "outcome": "ok"}); got < 6 {
		t.Errorf("brain appends = %v, want at least 6", got)
	}
	if got := value(fams, "corral_session_status_transitions_total", map[string]string{"status": "running"}); got < 2 {
		t.Errorf("running transitions = %v, want at least 2 (the turn, and after the retry)", got)
	}
	if got := value(fams, "corral_sandboxes_live", map[string]string{"backend": "stub"}); got < 0 || got > 1 {
		t.Errorf("corral_sandboxes_live{backend=stub} = %v, want the pool's one session slot or none", got)
	}
	// Every write went through the store's batcher: the group commits hold at least the brain's appends.
	if got := value(fams, "corral_store_group_commit_size", nil); got < 6 {
		t.Errorf("corral_store_group_commit_size count = %v, want at least the 6 brain appends", got)
	}
	if value(fams, "go_goroutines", nil) <= 0 {
		t.Error("no Go runtime metrics")
	}
}

// waitIdle polls the session until it is idle.
func waitIdle(t *testing.T, srv *server.Server, id string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var s struct{ Status string }
		do(t, srv, "GET", "/v1/sessions/"+id, nil, &s)
		if s.Status == "idle" {
			var page struct{ Data []event }
			do(t, srv, "GET", "/v1/sessions/"+id+"/events?limit=1000", nil, &page)
			if n := len(page.Data); n > 0 && page.Data[n-1].Type == "session.status_idle" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("session did not go idle")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMetricsWorkQueue: a bash call in a self_hosted environment queues a work item for the session, which
// /metrics shows as corral_work_queue_depth 1, and the session, waiting for the worker, in corral_sessions.
func TestMetricsWorkQueue(t *testing.T) {
	t.Parallel()
	fake := modeltest.NewServer(t)
	st := openStore(t)
	srv, err := server.New(server.Config{
		Store: st, Metrics: metrics.New(), MetricsListen: "127.0.0.1:0",
		API: &server.APIConfig{Listen: "127.0.0.1:0", Keys: &api.KeyAuth{Store: st, Static: key}},
		Brain: &harness.Config{Model: anthropic.New(anthropic.Config{APIKey: "test", BaseURL: fake.URL}),
			Workers: 1, PollInterval: 50 * time.Millisecond},
		Sandbox: server.SandboxConfig{Unavailable: "the worker runs the tools", Tools: (&stubProvider{}).Tools()},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	fake.Script(modeltest.Turn{ToolUses: []modeltest.ToolUse{{Name: "bash", Input: `{"command":"echo hi"}`}}})
	var agent, env, sess struct{ ID string }
	do(t, srv, "POST", "/v1/agents", map[string]any{"name": "a", "model": "claude-sonnet-4-5",
		"tools": []any{map[string]any{"type": "agent_toolset_20260401"}}}, &agent)
	do(t, srv, "POST", "/v1/environments", map[string]any{"name": "e", "config": map[string]any{"type": "self_hosted"}}, &env)
	do(t, srv, "POST", "/v1/sessions", map[string]any{"agent": agent.ID, "environment_id": env.ID}, &sess)
	if v := value(scrape(t, srv.MetricsURL()), "corral_work_queue_depth", nil); v != 0 {
		t.Fatalf("corral_work_queue_depth before any call = %v, want 0", v)
	}
	do(t, srv, "POST", "/v1/sessions/"+sess.ID+"/events", map[string]any{"events": []any{map[string]any{
		"type": "user.message", "content": []any{map[string]any{"type": "text", "text": "Run it."}}}}}, nil)
	deadline := time.Now().Add(30 * time.Second)
	for {
		fams := scrape(t, srv.MetricsURL())
		if value(fams, "corral_work_queue_depth", nil) == 1 {
			if total := value(fams, "corral_sessions", nil); total != 1 {
				t.Errorf("corral_sessions summed over statuses = %v, want 1", total)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the work item never showed in corral_work_queue_depth")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
