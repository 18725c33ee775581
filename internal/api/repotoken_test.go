package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// TestRepositoryToken: a repository's authorization_token is sealed beside the session, rotated by a resource
// update and removed with the resource; no response, event or stored document ever carries it, and the SQLite
// file holds only its ciphertext.
func TestRepositoryToken(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	dbPath := h.dbPath
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	const token, rotated = "ghp_canaryTokenOne0123456789", "ghs_canaryTokenTwo9876543210"

	var seen []string // every response body
	req := func(method, path, body string, want int) []byte {
		t.Helper()
		code, _, b := h.do(method, path, body)
		if code != want {
			t.Fatalf("%s %s: %d %s", method, path, code, b)
		}
		seen = append(seen, string(b))
		return b
	}
	body := fmt.Sprintf(`{"agent":%q,"environment_id":%q,"resources":[{"type":"github_repository",
		"url":"https://git.example.com/o/private","authorization_token":%q}],
		"initial_events":[{"type":"user.message","content":[{"type":"text","text":"hi"}]}]}`, agentID, envID, token)
	var sess apitype.Session
	if err := json.Unmarshal(req("POST", "/v1/sessions", body, http.StatusOK), &sess); err != nil {
		t.Fatal(err)
	}
	rid := sess.Resources[0].ID
	open := func(what string) string {
		t.Helper()
		sealed, err := h.store.ResourceSecretGet(ctx, &store.ResourceSecretRef{SessionID: sess.ID, ResourceID: rid,
			Name: api.SecretAuthorizationToken})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if bytes.Contains(sealed.Ciphertext, []byte(token)) || bytes.Contains(sealed.Ciphertext, []byte(rotated)) {
			t.Fatalf("%s: the stored token is not sealed", what)
		}
		plain, err := h.vault.Open(sealed)
		if err != nil {
			t.Fatalf("%s: open: %v", what, err)
		}
		return string(plain)
	}
	if got := open("after create"); got != token {
		t.Fatalf("sealed token opens to %q", got)
	}

	// Invalid tokens are refused without being echoed.
	for _, bad := range []string{"ghp_bad token", "ghp_bad\r\nX-Injected: 1"} {
		b, _ := json.Marshal(map[string]string{"authorization_token": bad})
		code, _, out := h.do("POST", "/v1/sessions/"+sess.ID+"/resources/"+rid, string(b))
		if code != http.StatusBadRequest || strings.Contains(string(out), "ghp_bad") {
			t.Errorf("bad token %q: %d %s", bad, code, out)
		}
	}
	req("POST", "/v1/sessions/"+sess.ID+"/resources/"+rid, fmt.Sprintf(`{"authorization_token":%q}`, rotated), http.StatusOK)
	if got := open("after rotation"); got != rotated {
		t.Fatalf("rotated token opens to %q", got)
	}
	req("GET", "/v1/sessions/"+sess.ID, "", http.StatusOK)
	req("GET", "/v1/sessions", "", http.StatusOK)
	req("GET", "/v1/sessions/"+sess.ID+"/resources", "", http.StatusOK)
	req("GET", "/v1/sessions/"+sess.ID+"/resources/"+rid, "", http.StatusOK)
	req("GET", "/v1/sessions/"+sess.ID+"/events", "", http.StatusOK)
	events, err := h.store.EventList(ctx, &store.EventListParams{SessionID: sess.ID, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		b, _ := json.Marshal(e)
		seen = append(seen, string(b))
	}
	stored, err := h.store.SessionGet(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(stored)
	seen = append(seen, string(b))
	for _, s := range seen {
		if strings.Contains(s, token) || strings.Contains(s, rotated) {
			t.Errorf("a response, event or stored session carries the token: %s", s)
		}
	}
	// The database files hold no plaintext token.
	for _, suffix := range []string{"", "-wal", "-shm"} {
		raw, err := os.ReadFile(dbPath + suffix)
		if err != nil {
			continue
		}
		if bytes.Contains(raw, []byte(token)) || bytes.Contains(raw, []byte(rotated)) {
			t.Errorf("%s holds the token in plaintext", filepath.Base(dbPath+suffix))
		}
	}

	req("DELETE", "/v1/sessions/"+sess.ID+"/resources/"+rid, "", http.StatusOK)
	if _, err := h.store.ResourceSecretGet(ctx, &store.ResourceSecretRef{SessionID: sess.ID, ResourceID: rid,
		Name: api.SecretAuthorizationToken}); err == nil {
		t.Errorf("the token outlived its resource")
	}
}

// TestRepositoryTokenWithoutSealer: a server without a vault key refuses a token rather than drop or keep it in
// plaintext, and does not echo it.
func TestRepositoryTokenWithoutSealer(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *api.Config) { c.Sealer = nil })
	ctx := ctxT(t)
	agentID, envID := h.seed(ctx)
	body := fmt.Sprintf(`{"agent":%q,"environment_id":%q,"resources":[{"type":"github_repository",
		"url":"https://git.example.com/o/private","authorization_token":"ghp_canaryNoSealer"}]}`, agentID, envID)
	code, _, out := h.do("POST", "/v1/sessions", body)
	if code != http.StatusInternalServerError || strings.Contains(string(out), "ghp_canary") || !strings.Contains(string(out), "vault key") {
		t.Fatalf("create without a sealer: %d %s", code, out)
	}
	sessions, err := h.store.SessionList(ctx, &store.SessionListParams{})
	if err != nil || len(sessions) != 0 {
		t.Fatalf("a session was created: %v %v", sessions, err)
	}
}
