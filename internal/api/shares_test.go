package api_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/store/postgres"
	"github.com/corralhq/corral/internal/store/postgres/pgtest"
)

// wantShareRefused asserts a 429 rate_limit_error with a retry-after of at least 1 s.
func wantShareRefused(t *testing.T, what string, code int, hdr http.Header, body []byte) {
	t.Helper()
	secs, err := strconv.Atoi(hdr.Get("retry-after"))
	if code != http.StatusTooManyRequests || err != nil || secs < 1 || !strings.Contains(string(body), "rate_limit_error") {
		t.Errorf("%s: %d retry-after %q %s, want a 429 with retry-after", what, code, hdr.Get("retry-after"), body)
	}
}

// getAgents lists the agents of srv with key, in workspace ws if set.
func getAgents(t *testing.T, srv *httptest.Server, key, ws string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctxT(t), "GET", srv.URL+"/v1/agents", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	if ws != "" {
		req.Header.Set("anthropic-workspace-id", ws)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// TestSharesRequestRate: a workspace's requests beyond its share are a 429 with retry-after; another
// workspace's go on.
func TestSharesRequestRate(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	wsA, keyA := h.workspaceKey("team a")
	_, keyB := h.workspaceKey("team b")
	h2 := httptest.NewServer(newAPI(t, api.Config{Store: h.store, Keys: &api.KeyAuth{Store: h.store},
		Shares: api.Shares{RequestRate: 0.01}}).Handler()) // a burst of 1, refilled in 100 s
	t.Cleanup(h2.Close)
	get := func(key string) (int, http.Header, []byte) { return getAgents(t, h2, key, "") }
	if code, _, b := get(keyA); code != http.StatusOK {
		t.Fatalf("A's first request: %d %s", code, b)
	}
	code, hdr, b := get(keyA)
	wantShareRefused(t, "A's second request", code, hdr, b)
	if !strings.Contains(string(b), wsA) {
		t.Errorf("the refusal names no workspace: %s", b)
	}
	if code, _, b := get(keyB); code != http.StatusOK {
		t.Errorf("B's request after A's were refused: %d %s", code, b)
	}
}

// TestSharesRunningSessions: a workspace runs at most its share of sessions: a session created running, or a
// message to an idle one, beyond it is a 429 with retry-after; a message to a running session joins its turn;
// another workspace's sessions start.
func TestSharesRunningSessions(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *api.Config) { c.Shares.RunningSessions = 1 })
	_, keyA := h.workspaceKey("team a")
	_, keyB := h.workspaceKey("team b")
	setup := func(key string) (string, string) {
		return h.seedAs(key, "/v1/agents", `{"name":"a","model":"m"}`), h.seedAs(key, "/v1/environments", `{"name":"e"}`)
	}
	agentA, envA := setup(keyA)
	agentB, envB := setup(keyB)
	msg := `"initial_events":[{"type":"user.message","content":[{"type":"text","text":"go"}]}]`
	running := h.seedAs(keyA, "/v1/sessions", `{"agent":"`+agentA+`","environment_id":"`+envA+`",`+msg+`}`)
	idle := h.seedAs(keyA, "/v1/sessions", `{"agent":"`+agentA+`","environment_id":"`+envA+`"}`)

	code, hdr, b := h.do("POST", "/v1/sessions", `{"agent":"`+agentA+`","environment_id":"`+envA+`",`+msg+`}`, "Authorization", "Bearer "+keyA)
	wantShareRefused(t, "A's second running session", code, hdr, b)
	send := `{"events":[{"type":"user.message","content":[{"type":"text","text":"more"}]}]}`
	code, hdr, b = h.do("POST", "/v1/sessions/"+idle+"/events", send, "Authorization", "Bearer "+keyA)
	wantShareRefused(t, "a message to A's idle session", code, hdr, b)
	if code, b := h.as(keyA, "POST", "/v1/sessions/"+running+"/events", send); code != http.StatusOK {
		t.Errorf("a message to A's running session: %d %s", code, b)
	}
	if code, b := h.as(keyA, "POST", "/v1/sessions/"+idle+"/events", `{"events":[{"type":"user.interrupt"}]}`); code != http.StatusOK {
		t.Errorf("an interrupt, which starts no turn: %d %s", code, b)
	}
	h.seedAs(keyB, "/v1/sessions", `{"agent":"`+agentB+`","environment_id":"`+envB+`",`+msg+`}`)
}

// TestSharesAcrossServers: two API servers on one PostgreSQL store give a workspace one request rate between
// them, not one each.
func TestSharesAcrossServers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := postgres.Open(ctx, pgtest.NewDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	servers := make([]*httptest.Server, 2)
	for i := range servers {
		servers[i] = httptest.NewServer(newAPI(t, api.Config{Store: st, Keys: &api.KeyAuth{Store: st, Static: testKey},
			Logger: slog.New(slog.DiscardHandler), Shares: api.Shares{RequestRate: 0.01}}).Handler())
		t.Cleanup(servers[i].Close)
	}
	if code, _, b := getAgents(t, servers[0], testKey, ""); code != http.StatusOK {
		t.Fatalf("the first request, to server 1: %d %s", code, b)
	}
	code, hdr, b := getAgents(t, servers[1], testKey, "")
	wantShareRefused(t, "the second request, to server 2", code, hdr, b)
}
