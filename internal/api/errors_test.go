package api_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

func TestAuth(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)

	for _, path := range []string{"/", "/healthz"} {
		status, hdr, body := h.do("GET", path, "", "Authorization", "")
		if status != http.StatusOK || !strings.HasPrefix(hdr.Get("request-id"), "req_") {
			t.Errorf("GET %s: %d %s", path, status, body)
		}
	}
	status, hdr, body := h.do("GET", "/v1/agents", "", "Authorization", "")
	var env envelope
	decodeRaw(t, string(body), &env)
	if status != http.StatusUnauthorized || env.Type != "error" || env.Error.Type != apitype.ErrAuthentication ||
		env.RequestID != hdr.Get("request-id") || env.RequestID == "" {
		t.Fatalf("no key: %d %s", status, body)
	}

	noKey := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(h.srv.URL),
		option.WithAPIKey("wrong"), option.WithMaxRetries(0), option.WithHTTPClient(h.srv.Client()))
	_, err := noKey.Beta.Agents.List(ctx, anthropic.BetaAgentListParams{})
	wantAPIError(t, err, http.StatusUnauthorized, apitype.ErrAuthentication)

	// x-api-key works as well as Bearer; unknown query parameters and beta headers are ignored.
	status, _, body = h.do("GET", "/v1/agents?beta=true&whatever=1", "", "Authorization", "", "x-api-key", testKey,
		"anthropic-beta", "future-beta-2099-01-01,managed-agents-2026-04-01", "anthropic-version", "2099-01-01")
	if status != http.StatusOK {
		t.Fatalf("x-api-key: %d %s", status, body)
	}

	// Keys kept in the store are looked up by the hash of the presented key, until revoked.
	secret := apitype.NewAPIKeySecret()
	key := &apitype.APIKey{ID: apitype.NewID(apitype.PrefixAPIKey), Name: "ci", Hash: apitype.HashAPIKey(secret),
		Hint: secret[len(secret)-4:], CreatedAt: apitype.Now()}
	if err := h.store.APIKeyCreate(ctx, key); err != nil {
		t.Fatal(err)
	}
	stored := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(h.srv.URL),
		option.WithAPIKey(secret), option.WithMaxRetries(0), option.WithHTTPClient(h.srv.Client()))
	if _, err := stored.Beta.Agents.List(ctx, anthropic.BetaAgentListParams{}); err != nil {
		t.Fatalf("stored key: %v", err)
	}
	if err := h.store.APIKeyRevoke(ctx, key.ID, apitype.Now()); err != nil {
		t.Fatal(err)
	}
	_, err = stored.Beta.Agents.List(ctx, anthropic.BetaAgentListParams{})
	wantAPIError(t, err, http.StatusUnauthorized, apitype.ErrAuthentication)
}

func TestMalformedRequests(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *api.Config) { c.MaxBodyBytes = 1 << 10 })
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		typ                      apitype.ErrorType
	}{
		{"malformed json", "POST", "/v1/agents", `{"name":`, 400, apitype.ErrInvalidRequest},
		{"not an object", "POST", "/v1/agents", `[1,2]`, 400, apitype.ErrInvalidRequest},
		{"trailing data", "POST", "/v1/agents", `{"name":"a","model":"m"} {}`, 400, apitype.ErrInvalidRequest},
		{"empty body", "POST", "/v1/environments", ``, 400, apitype.ErrInvalidRequest},
		{"oversized", "POST", "/v1/agents", `{"name":"` + strings.Repeat("a", 2<<10) + `","model":"m"}`, 413, apitype.ErrRequestTooLarge},
		{"unknown agent", "GET", "/v1/agents/agent_nope", ``, 404, apitype.ErrNotFound},
		{"unknown route", "GET", "/v1/nothing", ``, 404, apitype.ErrNotFound},
		{"wrong method", "PUT", "/v1/agents", `{}`, 405, apitype.ErrInvalidRequest},
		{"bad limit", "GET", "/v1/agents?limit=1000", ``, 400, apitype.ErrInvalidRequest},
		{"bad time", "GET", "/v1/agents?created_at[gte]=yesterday", ``, 400, apitype.ErrInvalidRequest},
		{"bad version", "GET", "/v1/agents/agent_x?version=0", ``, 400, apitype.ErrInvalidRequest},
		{"bad cursor", "GET", "/v1/environments?page=page", ``, 400, apitype.ErrInvalidRequest},
		{"events bad cursor", "GET", "/v1/sessions/sesn_x/events?page=eyJ0IjoxfQ", ``, 400, apitype.ErrInvalidRequest},
		{"resource of unknown session", "GET", "/v1/sessions/sesn_x/resources/sesrsc_x", ``, 404, apitype.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, hdr, body := h.do(tc.method, tc.path, tc.body)
			var env envelope
			decodeRaw(t, string(body), &env)
			if status != tc.status || env.Error.Type != tc.typ || env.Error.Message == "" ||
				!strings.Contains(hdr.Get("Content-Type"), "application/json") {
				t.Fatalf("%d %s, want %d %s", status, body, tc.status, tc.typ)
			}
		})
	}
}

// TestUncleanPath: a path with a "." or ".." segment or a doubled slash is answered 404 in the envelope, not
// redirected (a 307 keeps the method) to the cleaned path: DELETE .../resources/.. does not delete the session.
func TestUncleanPath(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	sessID := h.newSession(ctx, agentID, envID)
	for _, p := range []string{"/v1/sessions/" + sessID + "/resources/..", "/v1/sessions/" + sessID + "/resources/x/../..",
		"/v1/sessions/" + sessID + "/.", "/v1/sessions//" + sessID, "/v1/environments/" + envID + "/keys/.."} {
		status, hdr, body := h.do("DELETE", p, "")
		var env envelope
		decodeRaw(t, string(body), &env)
		if status != http.StatusNotFound || env.Error.Type != apitype.ErrNotFound || hdr.Get("Location") != "" {
			t.Errorf("DELETE %s: %d %s (Location %q), want 404", p, status, body, hdr.Get("Location"))
		}
	}
	for _, p := range []string{"/v1/sessions/" + sessID, "/v1/environments/" + envID} {
		if status, _, body := h.do("GET", p, ""); status != http.StatusOK {
			t.Errorf("GET %s: %d %s", p, status, body)
		}
	}
}

// TestUnstorableText: an id in the path, or a query parameter, that holds a NUL or bytes that are not UTF-8 is
// a 404 or a 400 in the envelope on each store backend (PostgreSQL stores neither: it was a 500).
func TestUnstorableText(t *testing.T) {
	t.Parallel()
	memoryBackends(t, func(t *testing.T, h *harness) {
		for _, tc := range []struct {
			method, path string
			status       int
		}{
			{"GET", "/v1/agents/%FF%FE", 404},
			{"POST", "/v1/agents/agent_%00", 404},
			{"DELETE", "/v1/sessions/sesn_%C3", 404},
			{"GET", "/v1/memory_stores/memstore_x/memories/%00", 404},
			{"GET", "/v1/sessions?agent_id=agent_%FF", 400},
			{"GET", "/v1/deployment_runs?deployment_id=%00", 400},
		} {
			status, hdr, body := h.do(tc.method, tc.path, `{"name":"x"}`)
			var env envelope
			decodeRaw(t, string(body), &env)
			if status != tc.status || env.Error.Type == "" || !strings.Contains(hdr.Get("Content-Type"), "application/json") {
				t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, status, body, tc.status)
			}
		}
	})
}

// TestBodyIDsWithNUL: an id in a body that holds a NUL (a session's agent and environment, an event's tool use or
// thread, a roster's agent) is a 400 naming the field on each store backend (PostgreSQL answered 500).
func TestBodyIDsWithNUL(t *testing.T) {
	t.Parallel()
	memoryBackends(t, func(t *testing.T, h *harness) {
		ctx := ctxT(t)
		agentID, envID := h.seed(ctx)
		sessID := h.newSession(ctx, agentID, envID)
		events := "/v1/sessions/" + sessID + "/events"
		for _, tc := range []struct{ path, body, field string }{
			{"/v1/sessions", `{"agent":"agent_\u0000","environment_id":"` + envID + `"}`, "agent.id"},
			{"/v1/sessions", `{"agent":{"type":"agent","id":"a\u0000"},"environment_id":"` + envID + `"}`, "agent.id"},
			{"/v1/sessions", `{"agent":"` + agentID + `","environment_id":"` + envID + `\u0000"}`, "environment_id"},
			{events, `{"events":[{"type":"user.custom_tool_result","custom_tool_use_id":"sevt_\u0000"}]}`, "events[0].custom_tool_use_id"},
			{events, `{"events":[{"type":"user.tool_confirmation","tool_use_id":"sevt_\u0000","result":"allow"}]}`, "events[0].tool_use_id"},
			{events, `{"events":[{"type":"user.interrupt","session_thread_id":"sthr_\u0000"}]}`, "events[0].session_thread_id"},
			{"/v1/agents", `{"name":"a","model":"m","multiagent":{"type":"coordinator","agents":["agent_\u0000"]}}`, "multiagent.agents[0]"},
			{"/v1/agents", `{"name":"a","model":"m","multiagent":{"type":"multiagent_20261001","subagents":{"type":"enabled",
				"predefined_agents":[{"type":"agent","id":"agent_\u0000"}]}}}`, "multiagent.subagents.predefined_agents[0].id"},
		} {
			status, _, body := h.do("POST", tc.path, tc.body)
			var env envelope
			decodeRaw(t, string(body), &env)
			if status != http.StatusBadRequest || !strings.HasPrefix(env.Error.Message, tc.field+": ") {
				t.Errorf("POST %s %s: %d %s, want 400 on %s", tc.path, tc.body, status, body, tc.field)
			}
		}
	})
}

// A 405 says which methods the path takes (RFC 9110, 15.5.6).
func TestMethodNotAllowedAllow(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for path, want := range map[string]string{"/v1/agents": "GET, POST", "/v1/environments/env_x": "GET, POST, DELETE"} {
		status, hdr, body := h.do("PUT", path, `{}`)
		if status != http.StatusMethodNotAllowed || hdr.Get("Allow") != want {
			t.Errorf("PUT %s: %d, Allow %q, want 405 and %q: %s", path, status, hdr.Get("Allow"), want, body)
		}
	}
}

func TestRateLimit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *api.Config) { c.RateLimit, c.RateBurst = 0.001, 2 })
	ctx := ctxT(t)
	for range 2 {
		if _, err := h.client.Beta.Agents.List(ctx, anthropic.BetaAgentListParams{}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := h.client.Beta.Agents.List(ctx, anthropic.BetaAgentListParams{})
	aerr := wantAPIError(t, err, http.StatusTooManyRequests, apitype.ErrRateLimit)
	if aerr.Response.Header.Get("retry-after") == "" {
		t.Error("no retry-after header")
	}
	// Health checks are not rate limited.
	if status, _, _ := h.do("GET", "/healthz", ""); status != http.StatusOK {
		t.Errorf("healthz: %d", status)
	}
}

// panicStore panics on AgentGet and fails EnvironmentGet, to exercise the 500 paths.
type panicStore struct{ store.Store }

func (panicStore) AgentGet(context.Context, *store.AgentGetParams) (*apitype.Agent, error) {
	panic("boom")
}

func (panicStore) EnvironmentGet(context.Context, string) (*apitype.Environment, error) {
	return nil, context.DeadlineExceeded
}

func TestInternalErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	client := httpServer(t, api.Config{Store: panicStore{h.store}, Keys: &api.KeyAuth{Static: testKey}},
		option.WithRequestTimeout(5*time.Second))
	ctx := ctxT(t)
	_, err := client.Beta.Agents.Get(ctx, "agent_x", anthropic.BetaAgentGetParams{})
	aerr := wantAPIError(t, err, http.StatusInternalServerError, apitype.ErrAPI)
	if strings.Contains(aerr.Message, "boom") {
		t.Errorf("panic leaked to the client: %q", aerr.Message)
	}
	_, err = client.Beta.Environments.Get(ctx, "env_x", anthropic.BetaEnvironmentGetParams{})
	aerr = wantAPIError(t, err, http.StatusInternalServerError, apitype.ErrAPI)
	if strings.Contains(aerr.Message, "deadline") {
		t.Errorf("cause leaked to the client: %q", aerr.Message)
	}
	// The server survives.
	if _, err := client.Beta.Agents.List(ctx, anthropic.BetaAgentListParams{}); err != nil {
		t.Fatalf("after panic: %v", err)
	}
}

// unreachableStore is a store whose database is out of reach: AgentGet fails with a connection error the
// adapter did not wrap (its Reachability recognizes it), EnvironmentGet with store.ErrUnavailable.
type unreachableStore struct{ store.Store }

var errRefused = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}

func (unreachableStore) AgentGet(context.Context, *store.AgentGetParams) (*apitype.Agent, error) {
	return nil, fmt.Errorf("agent get: %w", errRefused)
}

func (unreachableStore) EnvironmentGet(context.Context, string) (*apitype.Environment, error) {
	return nil, fmt.Errorf("environment get: %w: connection reset", store.ErrUnavailable)
}

func (unreachableStore) Unreachable(err error) bool { return errors.Is(err, errRefused) }

// TestStoreUnavailable: while the database is out of reach the API answers 503 with retry-after (which the
// SDKs retry), not a 500, and says nothing of the cause.
func TestStoreUnavailable(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	client := httpServer(t, api.Config{Store: unreachableStore{h.store}, Keys: &api.KeyAuth{Static: testKey}},
		option.WithMaxRetries(0))
	ctx := ctxT(t)
	_, err := client.Beta.Agents.Get(ctx, "agent_x", anthropic.BetaAgentGetParams{})
	aerr := wantAPIError(t, err, http.StatusServiceUnavailable, apitype.ErrAPI)
	if aerr.Response.Header.Get("retry-after") != "2" || strings.Contains(aerr.Message, "dial") {
		t.Errorf("503: retry-after %q, message %q", aerr.Response.Header.Get("retry-after"), aerr.Message)
	}
	_, err = client.Beta.Environments.Get(ctx, "env_x", anthropic.BetaEnvironmentGetParams{})
	aerr = wantAPIError(t, err, http.StatusServiceUnavailable, apitype.ErrAPI)
	if strings.Contains(aerr.Message, "reset") {
		t.Errorf("cause leaked to the client: %q", aerr.Message)
	}
}
