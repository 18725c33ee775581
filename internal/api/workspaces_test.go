package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// workspaceKey creates a workspace through the official SDK's admin API and mints a key of it with Corral's
// create extension; it returns the workspace's id and the key's secret.
func (h *harness) workspaceKey(name string) (string, string) {
	h.t.Helper()
	ws, err := h.client.Organization.Workspaces.New(ctxT(h.t), anthropic.OrganizationWorkspaceNewParams{Name: name})
	if err != nil {
		h.t.Fatalf("create workspace %s: %v", name, err)
	}
	if ws.Name != name || !strings.HasPrefix(ws.ID, apitype.PrefixWorkspace) {
		h.t.Fatalf("created workspace %+v", ws)
	}
	return ws.ID, h.seedKey(ws.ID, name+" key")
}

// as sends a request with key (and more headers), like harness.do with the test key.
func (h *harness) as(key, method, path, body string, hdr ...string) (int, []byte) {
	h.t.Helper()
	code, _, b := h.do(method, path, body, append([]string{"Authorization", "Bearer " + key}, hdr...)...)
	return code, b
}

// seedAs creates a resource with key and returns its id.
func (h *harness) seedAs(key, path, body string) string {
	h.t.Helper()
	code, b := h.as(key, "POST", path, body)
	if code != http.StatusOK {
		h.t.Fatalf("POST %s: %d %s", path, code, b)
	}
	var v struct {
		ID string `json:"id"`
	}
	decodeRaw(h.t, string(b), &v)
	return v.ID
}

// uploadAs uploads a file with key and returns its id.
func (h *harness) uploadAs(key, name, content string) string {
	h.t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, err := mw.CreateFormFile("file", name)
	if err != nil {
		h.t.Fatal(err)
	}
	fmt.Fprint(fw, content)
	if err := mw.Close(); err != nil {
		h.t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctxT(h.t), "POST", h.srv.URL+"/v1/files", &buf)
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	var f struct {
		ID string `json:"id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&f); err != nil || resp.StatusCode != http.StatusOK {
		h.t.Fatalf("upload: %d %v", resp.StatusCode, err)
	}
	return f.ID
}

// TestWorkspacesKeepApart is the red team of the API's boundary: with the key of workspace B, every resource
// of workspace A is a 404 by its path (read, change, delete, its children), absent from every list, and a 404
// when a body names it (a session of B on A's agent, environment, vault, file or memory store); a request of
// B's key naming A is refused; the organization admin key reaches A's resources by naming A, and not without.
func TestWorkspacesKeepApart(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withFiles(t, t.TempDir(), 1<<20))
	wsA, keyA := h.workspaceKey("team a")
	wsB, keyB := h.workspaceKey("team b")

	agentA := h.seedAs(keyA, "/v1/agents", `{"name":"a","model":"m"}`)
	envA := h.seedAs(keyA, "/v1/environments", `{"name":"e"}`)
	vaultA := h.seedAs(keyA, "/v1/vaults", `{"display_name":"v"}`)
	credA := h.seedAs(keyA, "/v1/vaults/"+vaultA+"/credentials",
		`{"auth":{"type":"static_bearer","mcp_server_url":"https://mcp.example/mcp","token":"secret-of-a"}}`)
	storeA := h.seedAs(keyA, "/v1/memory_stores", `{"name":"notes"}`)
	memA := h.seedAs(keyA, "/v1/memory_stores/"+storeA+"/memories", `{"path":"/a.md","content":"a's memory"}`)
	fileA := h.uploadAs(keyA, "a.txt", "a's file")
	sessA := h.seedAs(keyA, "/v1/sessions", `{"agent":"`+agentA+`","environment_id":"`+envA+`","vault_ids":["`+vaultA+`"]}`)
	tunnelA := h.seedAs(keyA, "/v1/tunnels", `{"display_name":"t"}`)
	hookA := h.seedAs(keyA, "/v1/organizations/webhooks", `{"url":"https://hooks.example.com/a","enabled_events":["session.created"]}`)
	deplA := h.seedAs(keyA, "/v1/deployments", `{"name":"d","agent":"`+agentA+`","environment_id":"`+envA+`",`+
		`"initial_events":[{"type":"user.message","content":[{"type":"text","text":"go"}]}],`+
		`"schedule":{"type":"cron","expression":"0 9 * * 1-5","timezone":"UTC"}}`)
	h.seedAs(keyB, "/v1/agents", `{"name":"b","model":"m"}`)

	paths := []struct{ method, path, body string }{
		{"GET", "/v1/agents/" + agentA, ""},
		{"POST", "/v1/agents/" + agentA, `{"version":1,"name":"taken"}`},
		{"POST", "/v1/agents/" + agentA + "/archive", ""},
		{"GET", "/v1/agents/" + agentA + "/versions", ""},
		{"GET", "/v1/environments/" + envA, ""},
		{"DELETE", "/v1/environments/" + envA, ""},
		{"POST", "/v1/environments/" + envA + "/keys", `{"name":"k"}`},
		{"GET", "/v1/environments/" + envA + "/work", ""},
		{"GET", "/v1/vaults/" + vaultA, ""},
		{"GET", "/v1/vaults/" + vaultA + "/credentials", ""},
		{"GET", "/v1/vaults/" + vaultA + "/credentials/" + credA, ""},
		{"DELETE", "/v1/vaults/" + vaultA + "/credentials/" + credA, ""},
		{"GET", "/v1/memory_stores/" + storeA, ""},
		{"GET", "/v1/memory_stores/" + storeA + "/memories/" + memA, ""},
		{"POST", "/v1/memory_stores/" + storeA + "/memories", `{"path":"/b.md","content":"planted"}`},
		{"GET", "/v1/files/" + fileA, ""},
		{"GET", "/v1/files/" + fileA + "/content", ""},
		{"DELETE", "/v1/files/" + fileA, ""},
		{"GET", "/v1/sessions/" + sessA, ""},
		{"GET", "/v1/sessions/" + sessA + "/events", ""},
		{"POST", "/v1/sessions/" + sessA + "/events", `{"events":[{"type":"user.message","content":[{"type":"text","text":"hi"}]}]}`},
		{"GET", "/v1/sessions/" + sessA + "/events/stream", ""},
		{"GET", "/v1/sessions/" + sessA + "/threads", ""},
		{"GET", "/v1/sessions/" + sessA + "/resources", ""},
		{"DELETE", "/v1/sessions/" + sessA, ""},
		{"GET", "/v1/tunnels/" + tunnelA, ""},
		{"POST", "/v1/tunnels/" + tunnelA + "/reveal_token", ""},
		{"GET", "/v1/organizations/webhooks/" + hookA, ""},
		{"GET", "/v1/organizations/webhooks/" + hookA + "/deliveries", ""},
		{"GET", "/v1/deployments/" + deplA, ""},
		{"POST", "/v1/deployments/" + deplA + "/run", ""},
	}
	for _, p := range paths {
		code, body := h.as(keyB, p.method, p.path, p.body)
		if code != http.StatusNotFound || !strings.Contains(string(body), "not found") {
			t.Errorf("B's key: %s %s = %d %s, want a 404 as for no such resource", p.method, p.path, code, body)
		}
	}

	// B's key on B's lists: none of A's resources.
	aIDs := []string{agentA, envA, vaultA, storeA, fileA, sessA, tunnelA, hookA, deplA}
	for _, list := range []string{"/v1/agents", "/v1/environments", "/v1/vaults", "/v1/memory_stores", "/v1/files",
		"/v1/sessions", "/v1/tunnels", "/v1/organizations/webhooks", "/v1/deployments", "/v1/deployment_runs",
		"/v1/files?ids=" + fileA} {
		code, body := h.as(keyB, "GET", list, "")
		if code != http.StatusOK {
			t.Fatalf("B's key: GET %s = %d %s", list, code, body)
		}
		for _, id := range aIDs {
			if strings.Contains(string(body), id) {
				t.Errorf("B's key: GET %s lists A's %s", list, id)
			}
		}
	}
	// A's key lists A's.
	if code, body := h.as(keyA, "GET", "/v1/agents", ""); code != http.StatusOK || !strings.Contains(string(body), agentA) ||
		strings.Count(string(body), `"id":"agent_`) != 1 {
		t.Errorf("A's key: GET /v1/agents = %d %s, want A's agent alone", code, body)
	}

	// B's bodies naming A's resources find nothing.
	envB := h.seedAs(keyB, "/v1/environments", `{"name":"e"}`)
	agentB := h.seedAs(keyB, "/v1/agents", `{"name":"b2","model":"m"}`)
	for name, c := range map[string]struct{ body, id string }{
		"A's agent":        {`{"agent":"` + agentA + `","environment_id":"` + envB + `"}`, agentA},
		"A's environment":  {`{"agent":"` + agentB + `","environment_id":"` + envA + `"}`, envA},
		"A's vault":        {`{"agent":"` + agentB + `","environment_id":"` + envB + `","vault_ids":["` + vaultA + `"]}`, vaultA},
		"A's file":         {`{"agent":"` + agentB + `","environment_id":"` + envB + `","resources":[{"type":"file","file_id":"` + fileA + `"}]}`, fileA},
		"A's memory store": {`{"agent":"` + agentB + `","environment_id":"` + envB + `","resources":[{"type":"memory_store","memory_store_id":"` + storeA + `"}]}`, storeA},
		"A's file as a rubric": {`{"agent":"` + agentB + `","environment_id":"` + envB + `","initial_events":[{"type":"user.define_outcome",` +
			`"description":"d","rubric":{"type":"file","file_id":"` + fileA + `"}}]}`, fileA},
	} {
		// Refused exactly as the same body naming an id that no workspace has.
		prefix, _, _ := strings.Cut(c.id, "011C")
		none := apitype.NewID(prefix)
		code, b := h.as(keyB, "POST", "/v1/sessions", c.body)
		wantCode, want := h.as(keyB, "POST", "/v1/sessions", strings.ReplaceAll(c.body, c.id, none))
		if code < 400 || code >= 500 || code != wantCode || !bytes.Equal(errMessage(t, b), bytes.ReplaceAll(errMessage(t, want), []byte(none), []byte(c.id))) {
			t.Errorf("B's session on %s: %d %s, want as for no such resource: %d %s", name, code, b, wantCode, want)
		}
	}
	code, b := h.as(keyB, "POST", "/v1/agents", `{"name":"roster","model":"m","multiagent":{"type":"coordinator","agents":[{"type":"agent","id":"`+agentA+`"}]}}`)
	if code < 400 || code >= 500 {
		t.Errorf("B's agent with A's agent in its roster: %d %s", code, b)
	}

	// B's key naming A is refused; so is the admin API.
	if code, b := h.as(keyB, "GET", "/v1/agents/"+agentA, "", "anthropic-workspace-id", wsA); code != http.StatusForbidden {
		t.Errorf("B's key naming A: %d %s, want 403", code, b)
	}
	if code, b := h.as(keyB, "GET", "/v1/agents", "", "anthropic-workspace-id", wsB); code != http.StatusOK {
		t.Errorf("B's key naming B: %d %s", code, b)
	}
	for _, p := range []string{"/v1/organizations/workspaces", "/v1/organizations/api_keys", "/v1/organizations/workspaces/" + wsB} {
		if code, b := h.as(keyB, "GET", p, ""); code != http.StatusForbidden {
			t.Errorf("B's key: GET %s = %d %s, want 403", p, code, b)
		}
	}

	// The organization admin key: A's resources by naming A, not in the default workspace.
	if code, _, b := h.do("GET", "/v1/agents/"+agentA, ""); code != http.StatusNotFound {
		t.Errorf("admin key, default workspace: A's agent = %d %s, want 404", code, b)
	}
	if code, _, b := h.do("GET", "/v1/agents/"+agentA, "", "anthropic-workspace-id", wsA); code != http.StatusOK {
		t.Errorf("admin key naming A: A's agent = %d %s", code, b)
	}
	if code, _, b := h.do("GET", "/v1/agents", "", "anthropic-workspace-id", "wrkspc_nosuch"); code != http.StatusNotFound {
		t.Errorf("admin key naming no workspace: %d %s, want 404", code, b)
	}
	if code, _, b := h.do("GET", "/v1/agents", "", "anthropic-workspace-id", "default"); code != http.StatusOK ||
		strings.Contains(string(b), agentA) {
		t.Errorf(`admin key naming "default": %d %s`, code, b)
	}
	// Nothing of A changed through B.
	if code, b := h.as(keyA, "GET", "/v1/memory_stores/"+storeA+"/memories", ""); code != http.StatusOK || strings.Contains(string(b), "planted") {
		t.Errorf("A's memories after B's attempts: %d %s", code, b)
	}
	if code, b := h.as(keyA, "GET", "/v1/sessions/"+sessA, ""); code != http.StatusOK {
		t.Errorf("A's session after B's attempts: %d %s", code, b)
	}
}

// TestWorkspaceAdminSDK: the official SDK's admin client manages workspaces and keys: create, get, update and
// list workspaces (the default one only when asked), archive one, whose keys then stop at once and whose
// running sessions are interrupted; list, get and turn keys off and on; the default workspace cannot be archived.
func TestWorkspaceAdminSDK(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	org := h.client.Organization
	wsID, key := h.workspaceKey("team c")
	got, err := org.Workspaces.Get(ctx, wsID)
	if err != nil || got.Name != "team c" || !got.ArchivedAt.IsZero() {
		t.Fatalf("get: %+v %v", got, err)
	}
	up, err := org.Workspaces.Update(ctx, wsID, anthropic.OrganizationWorkspaceUpdateParams{
		Name: anthropic.String("team c2"), DisplayColor: anthropic.String("#aabbcc"), Tags: map[string]string{"cost": "7"}})
	if err != nil || up.Name != "team c2" || up.DisplayColor != "#aabbcc" || up.Tags["cost"] != "7" {
		t.Fatalf("update: %+v %v", up, err)
	}
	_, err = org.Workspaces.Update(ctx, wsID, anthropic.OrganizationWorkspaceUpdateParams{DisplayColor: anthropic.String("red")})
	wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest)
	_, err = org.Workspaces.New(ctx, anthropic.OrganizationWorkspaceNewParams{Name: strings.Repeat("n", 41)})
	wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest)
	_, err = org.Workspaces.Get(ctx, "wrkspc_nosuch")
	wantAPIError(t, err, http.StatusNotFound, apitype.ErrNotFound)

	other, err := org.Workspaces.New(ctx, anthropic.OrganizationWorkspaceNewParams{Name: "team d"})
	if err != nil {
		t.Fatal(err)
	}
	names := func(params anthropic.OrganizationWorkspaceListParams) []string {
		t.Helper()
		var out []string
		iter := org.Workspaces.ListAutoPaging(ctx, params)
		for iter.Next() {
			out = append(out, iter.Current().ID)
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if ids := names(anthropic.OrganizationWorkspaceListParams{Limit: anthropic.Int(1)}); !slices.Equal(ids, []string{wsID, other.ID}) {
		t.Errorf("list by pages of 1: %v, want %s %s", ids, wsID, other.ID)
	}
	if ids := names(anthropic.OrganizationWorkspaceListParams{IncludeDefault: anthropic.Bool(true)}); !slices.Contains(ids, apitype.DefaultWorkspaceID) {
		t.Errorf("list with the default: %v", ids)
	}

	// The key: listed, got, turned off (401) and on again.
	keys, err := org.APIKeys.List(ctx, anthropic.OrganizationAPIKeyListParams{WorkspaceID: anthropic.String(wsID)})
	if err != nil || len(keys.Data) != 1 || keys.Data[0].Scope.WorkspaceID != wsID || keys.Data[0].Status != "active" {
		t.Fatalf("list keys of %s: %+v %v", wsID, keys, err)
	}
	keyID := keys.Data[0].ID
	if k, err := org.APIKeys.Get(ctx, keyID); err != nil || k.Name != "team c key" {
		t.Fatalf("get key: %+v %v", k, err)
	}
	if _, err := org.APIKeys.Update(ctx, keyID, anthropic.OrganizationAPIKeyUpdateParams{Status: "inactive"}); err != nil {
		t.Fatal(err)
	}
	if code, b := h.as(key, "GET", "/v1/agents", ""); code != http.StatusUnauthorized {
		t.Errorf("an inactive key: %d %s, want 401", code, b)
	}
	if _, err := org.APIKeys.Update(ctx, keyID, anthropic.OrganizationAPIKeyUpdateParams{Status: "active"}); err != nil {
		t.Fatal(err)
	}

	// A running session of the workspace; archiving it stops the key at once and interrupts the session.
	agent := h.seedAs(key, "/v1/agents", `{"name":"a","model":"m"}`)
	env := h.seedAs(key, "/v1/environments", `{"name":"e"}`)
	sess := h.seedAs(key, "/v1/sessions", `{"agent":"`+agent+`","environment_id":"`+env+`",`+
		`"initial_events":[{"type":"user.message","content":[{"type":"text","text":"go"}]}]}`)
	arch, err := org.Workspaces.Archive(ctx, wsID)
	if err != nil || arch.ArchivedAt.IsZero() {
		t.Fatalf("archive: %+v %v", arch, err)
	}
	if code, b := h.as(key, "GET", "/v1/agents", ""); code != http.StatusUnauthorized || !strings.Contains(string(b), "archived") {
		t.Errorf("a key of an archived workspace: %d %s, want 401", code, b)
	}
	code, _, b := h.do("GET", "/v1/sessions/"+sess+"/events?limit=100", "", "anthropic-workspace-id", wsID)
	if code != http.StatusForbidden {
		t.Errorf("admin key naming an archived workspace: %d %s, want 403", code, b)
	}
	evs, err := h.store.EventList(ctx, &store.EventListParams{SessionID: sess, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(evs, func(e apitype.Event) bool { return e.Type == apitype.EventUserInterrupt }) {
		t.Errorf("the archived workspace's running session was not interrupted: %d events", len(evs))
	}
	if _, err := org.Workspaces.Update(ctx, wsID, anthropic.OrganizationWorkspaceUpdateParams{Name: anthropic.String("x")}); err == nil {
		t.Error("an archived workspace was updated")
	}
	if ids := names(anthropic.OrganizationWorkspaceListParams{}); slices.Contains(ids, wsID) {
		t.Errorf("the archived workspace is listed without include_archived: %v", ids)
	}
	if code, _, b := h.do("GET", "/v1/organizations/api_keys?workspace_id=wrkspc_none", ""); code != http.StatusOK ||
		!strings.Contains(string(b), `"data":[]`) {
		t.Errorf("an empty list of keys: %d %s, want data []", code, b)
	}
	_, err = org.Workspaces.Archive(ctx, apitype.DefaultWorkspaceID)
	wantAPIError(t, err, http.StatusBadRequest, apitype.ErrInvalidRequest)

	// A workspace key on the admin API through the SDK: 403.
	wc := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(h.srv.URL),
		option.WithAPIKey(h.seedKey(other.ID, "d")), option.WithMaxRetries(0), option.WithHTTPClient(h.srv.Client()))
	_, err = wc.Organization.Workspaces.List(ctx, anthropic.OrganizationWorkspaceListParams{})
	wantAPIError(t, err, http.StatusForbidden, apitype.ErrPermission)
	// ... and on its own workspace through the SDK's workspace option.
	wc = anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(h.srv.URL),
		option.WithAPIKey(h.seedKey(other.ID, "d")), option.WithMaxRetries(0), option.WithHTTPClient(h.srv.Client()),
		option.WithHeader("anthropic-workspace-id", wsID))
	_, err = wc.Beta.Agents.List(ctx, anthropic.BetaAgentListParams{})
	wantAPIError(t, err, http.StatusForbidden, apitype.ErrPermission)
}

// seedKey mints a key of workspace ws with Corral's create extension and returns its secret.
func (h *harness) seedKey(ws, name string) string {
	h.t.Helper()
	code, _, body := h.do("POST", "/v1/organizations/api_keys", `{"name":"`+name+`","workspace_id":"`+ws+`"}`)
	if code != http.StatusOK {
		h.t.Fatalf("create a key of %s: %d %s", ws, code, body)
	}
	var k struct {
		Secret string `json:"secret"`
		Scope  struct {
			Type        string `json:"type"`
			WorkspaceID string `json:"workspace_id"`
		} `json:"scope"`
	}
	decodeRaw(h.t, string(body), &k)
	if k.Scope.Type != "workspace" || k.Scope.WorkspaceID != ws || !strings.HasPrefix(k.Secret, apitype.APIKeySecretPrefix) {
		h.t.Fatalf("the key of %s: %s", ws, body)
	}
	return k.Secret
}

// errMessage is the message of an error body.
func errMessage(t *testing.T, body []byte) []byte {
	t.Helper()
	var e envelope
	decodeRaw(t, string(body), &e)
	return []byte(e.Error.Message)
}

// TestWorkspaceWorkers: a self-hosted worker of workspace A (its environment key, the sessions token a poll gives
// it) acts in A alone: naming another workspace is refused, B's environment is not its own, and when A is
// archived both stop at once.
func TestWorkspaceWorkers(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := ctxT(t)
	wsA, keyA := h.workspaceKey("team a")
	wsB, keyB := h.workspaceKey("team b")
	hosted := func(key string) (env, envKey, sess string) {
		t.Helper()
		env = h.seedAs(key, "/v1/environments", `{"name":"hosted","config":{"type":"self_hosted"}}`)
		code, b := h.as(key, "POST", "/v1/environments/"+env+"/keys", `{"name":"w"}`)
		var k apitype.EnvironmentKey
		decodeRaw(t, string(b), &k)
		if code != http.StatusOK || k.Key == "" {
			t.Fatalf("environment key: %d %s", code, b)
		}
		agent := h.seedAs(key, "/v1/agents", `{"name":"a","model":"m"}`)
		sess = h.seedAs(key, "/v1/sessions", `{"agent":"`+agent+`","environment_id":"`+env+`"}`)
		return env, k.Key, sess
	}
	envA, envKeyA, sessA := hosted(keyA)
	envB, _, _ := hosted(keyB)
	w := h.queue(ctx, envA, sessA)
	code, b := h.as(envKeyA, "GET", "/v1/environments/"+envA+"/work/poll", "")
	var polled apitype.Work
	decodeRaw(t, string(b), &polled)
	if code != http.StatusOK || polled.ID != w.ID || polled.Secret == nil {
		t.Fatalf("A's worker polls A: %d %s", code, b)
	}
	token := apitype.SessionsTokenFromSecret(*polled.Secret)
	for _, c := range []struct {
		name, cred, path string
		hdr              []string
		want             int
	}{
		{"A's environment key on B's environment", envKeyA, "/v1/environments/" + envB + "/work/poll", nil, http.StatusForbidden},
		{"A's environment key naming B", envKeyA, "/v1/environments/" + envA + "/work/stats", []string{"anthropic-workspace-id", wsB}, http.StatusForbidden},
		{"A's token naming B", token, "/v1/sessions/" + sessA + "/events", []string{"anthropic-workspace-id", wsB}, http.StatusForbidden},
		{"A's token naming A", token, "/v1/sessions/" + sessA + "/events", []string{"anthropic-workspace-id", wsA}, http.StatusOK},
	} {
		if code, b := h.as(c.cred, "GET", c.path, "", c.hdr...); code != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, code, b, c.want)
		}
	}
	if _, err := h.client.Organization.Workspaces.Archive(ctx, wsA); err != nil {
		t.Fatal(err)
	}
	if code, b := h.as(envKeyA, "GET", "/v1/environments/"+envA+"/work/stats", ""); code != http.StatusUnauthorized {
		t.Errorf("A's environment key after A was archived: %d %s, want 401", code, b)
	}
	if code, b := h.as(token, "GET", "/v1/sessions/"+sessA+"/events", ""); code != http.StatusUnauthorized {
		t.Errorf("A's sessions token after A was archived: %d %s, want 401", code, b)
	}
}

// TestWorkspaceTunnelShare: a workspace has at most 64 active tunnels (so its connectors take at most half of a
// process's connections); archiving one makes room; another workspace's are its own.
func TestWorkspaceTunnelShare(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	_, keyA := h.workspaceKey("team a")
	_, keyB := h.workspaceKey("team b")
	var first string
	for i := range 64 {
		id := h.seedAs(keyA, "/v1/tunnels", `{}`)
		if i == 0 {
			first = id
		}
	}
	if code, b := h.as(keyA, "POST", "/v1/tunnels", `{}`); code != http.StatusBadRequest || !strings.Contains(string(b), "64 active tunnels") {
		t.Fatalf("A's 65th tunnel: %d %s", code, b)
	}
	h.seedAs(keyB, "/v1/tunnels", `{}`)
	if code, b := h.as(keyA, "POST", "/v1/tunnels/"+first+"/archive", ""); code != http.StatusOK {
		t.Fatalf("archive: %d %s", code, b)
	}
	h.seedAs(keyA, "/v1/tunnels", `{}`)
}
