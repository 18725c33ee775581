package harness_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/harness"
	"github.com/corralhq/corral/internal/mcp/mcptest"
	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/proxy"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/vault"
)

const (
	mcpUse    = apitype.EventAgentMCPToolUse
	mcpResult = apitype.EventAgentMCPToolResult
)

// syncBuffer is a log sink shared by goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// mcpRig is a real MCP server (official SDK, bearer tokens, an OAuth token endpoint) on 127.0.0.1, the MCP
// proxy over the fixture's store with a real vault, and a brain log.
type mcpRig struct {
	f     *fixture
	srv   *mcptest.Server
	vault *vault.Vault
	proxy *proxy.MCP
	logs  *syncBuffer
	cfg   mcptest.Config
}

func newMCPRig(t *testing.T, f *fixture, cfg mcptest.Config) *mcpRig {
	t.Helper()
	v, err := vault.Open(context.Background(), f.store, vault.NewKey())
	if err != nil {
		t.Fatal(err)
	}
	r := &mcpRig{f: f, srv: mcptest.New(t, cfg), vault: v, logs: &syncBuffer{}, cfg: cfg}
	u, _ := url.Parse(r.srv.URL)
	logger := slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r.proxy, err = proxy.NewMCP(proxy.MCPConfig{Store: f.store, Vault: v, AllowInternal: []string{u.Host}, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.proxy.Close() })
	return r
}

func (r *mcpRig) config() harness.Config {
	cfg := r.f.config()
	cfg.MCP = r.proxy
	cfg.Logger = slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return cfg
}

// oauthVault creates a vault holding an mcp_oauth credential for the server, its access token expiring soon (the
// proxy refreshes it before its first request).
func (r *mcpRig) oauthVault(t *testing.T, mcpURL string) string {
	t.Helper()
	ctx := context.Background()
	now := apitype.Now()
	vl := &apitype.Vault{Type: apitype.ObjectVault, ID: apitype.NewID(apitype.PrefixVault), DisplayName: "v", Metadata: map[string]string{},
		CreatedAt: now, UpdatedAt: now}
	if err := r.f.store.VaultCreate(ctx, vl); err != nil {
		t.Fatal(err)
	}
	soon := time.Now().Add(10 * time.Second).UTC()
	c := &apitype.Credential{Type: apitype.ObjectCredential, ID: apitype.NewID(apitype.PrefixCredential), VaultID: vl.ID,
		Metadata: map[string]string{}, CreatedAt: now, UpdatedAt: now,
		Auth: apitype.CredentialAuth{Type: apitype.AuthMCPOAuth, MCPServerURL: mcpURL, ExpiresAt: &soon,
			Refresh: &apitype.OAuthRefresh{ClientID: r.cfg.ClientID, TokenEndpoint: r.srv.TokenURL,
				TokenEndpointAuth: apitype.TokenEndpointAuth{Type: r.cfg.TokenAuth}}}}
	var secrets []store.SealedSecret
	for name, val := range map[string]string{"access_token": r.srv.IssueAccess(), "refresh_token": r.srv.IssueRefresh(), "client_secret": r.cfg.ClientSecret} {
		if val == "" {
			continue
		}
		s, err := r.vault.Seal(c.ID, name, []byte(val))
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, *s)
	}
	if err := r.f.store.CredentialCreate(ctx, &store.CredentialCreateParams{Credential: c, MatchKey: mcpURL, Secrets: secrets}); err != nil {
		t.Fatal(err)
	}
	return vl.ID
}

// session creates a session whose agent has the servers and tools, with the vaults.
func (r *mcpRig) session(t *testing.T, servers []apitype.MCPServer, tools []apitype.Tool, vaults ...string) string {
	t.Helper()
	id := r.f.session(tools...)
	ctx := context.Background()
	if _, err := r.f.store.SessionUpdate(ctx, id, func(s *apitype.Session) error {
		s.Agent.MCPServers, s.VaultIDs = servers, vaults
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return id
}

// redTeam searches the session's log (every event's JSON), the brain's and proxy's log and the model's
// requests for every token and secret the MCP server knows.
func (r *mcpRig) redTeam(t *testing.T, sessionID string) {
	t.Helper()
	var hay strings.Builder
	for _, e := range r.f.events(sessionID) {
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		hay.Write(b)
	}
	for _, req := range r.f.srv.Requests() {
		hay.Write(req.Body)
	}
	logs := r.logs.String()
	secrets := r.srv.Secrets()
	if len(secrets) < 2 {
		t.Fatalf("only %d secrets issued: the search below proves little", len(secrets))
	}
	for _, s := range secrets {
		if strings.Contains(hay.String(), s) {
			t.Errorf("the session log or the model's requests hold the secret %s…", s[:10])
		}
		if strings.Contains(logs, s) {
			t.Errorf("the brain's log holds the secret %s…", s[:10])
		}
	}
}

var toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// TestMCPToolsThroughBrain: an agent with an MCP server and an mcp_oauth credential calls the server's tools end
// to end. The model is offered the enabled tools with their schemas; an always_allow call runs at once with
// agent.mcp_tool_use and agent.mcp_tool_result, an always_ask one waits for user.tool_confirmation, a 300 KiB
// result is capped with a note, a tool error is an error result the model sees, the token is refreshed
// before it expires and again on a 401, and no token shows in the log, the model's requests or the logs.
func TestMCPToolsThroughBrain(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := newMCPRig(t, f, mcptest.Config{ClientID: "corral", ClientSecret: "client-secret-brain", TokenAuth: apitype.TokenAuthClientSecretBasic})
	r.f.srv.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{ID: "toolu_echo", Name: "mcp__tracker__echo", Input: `{"text":"hi"}`}}},
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{ID: "toolu_danger", Name: "mcp__tracker__danger", Input: `{}`}}},
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{ID: "toolu_big", Name: "mcp__tracker__big", Input: `{}`}}},
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{ID: "toolu_fail", Name: "mcp__tracker__fail", Input: `{}`}}},
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{ID: "toolu_leak", Name: "mcp__tracker__leak", Input: `{}`}}},
		modeltest.Turn{Text: "All done."},
	)
	servers := []apitype.MCPServer{{Type: apitype.MCPServerURL, Name: "tracker", URL: r.srv.MCPURL}}
	tools := []apitype.Tool{{Type: apitype.ToolTypeMCPToolset, MCPServerName: "tracker",
		DefaultConfig: &apitype.ToolDefaults{Enabled: true, PermissionPolicy: apitype.PermissionPolicy{Type: apitype.PolicyAlwaysAllow}},
		Configs: []apitype.ToolConfig{
			{Name: "danger", Enabled: true, PermissionPolicy: apitype.PermissionPolicy{Type: apitype.PolicyAlwaysAsk}},
			{Name: "slow", Enabled: false, PermissionPolicy: apitype.PermissionPolicy{Type: apitype.PolicyAlwaysAllow}},
		}}}
	f.start(r.config())
	id := r.session(t, servers, tools, r.oauthVault(t, r.srv.MCPURL))
	f.say(id, "Work the tracker.")

	evs := f.waitIdle(id, 1)
	last := evs[len(evs)-1]
	reason := stopReason(t, last)
	if reason.Type != apitype.StopRequiresAction || len(reason.EventIDs) != 1 {
		t.Fatalf("idle %+v; log %v", reason, types(evs))
	}
	if r.srv.Calls("danger") != 0 {
		t.Fatal("the always_ask tool ran before it was confirmed")
	}
	ask := slices.IndexFunc(evs, func(e apitype.Event) bool { return e.ID == reason.EventIDs[0] })
	use := decode[apitype.AgentMCPToolUse](t, evs[ask])
	if evs[ask].Type != mcpUse || use.Name != "danger" || use.MCPServerName != "tracker" || use.EvaluatedPermission != apitype.PermissionAsk {
		t.Fatalf("pending %s %+v", evs[ask].Type, use)
	}
	f.send(id, confirm, apitype.UserToolConfirmation{ToolUseID: evs[ask].ID, Result: apitype.ConfirmAllow})

	evs = f.waitFor(id, "the end of the turn", func(evs []apitype.Event) bool {
		return evs[len(evs)-1].Type == idle && stopReason(t, evs[len(evs)-1]).Type == apitype.StopEndTurn
	})
	// The model was offered the enabled tools, with their schemas, under valid names.
	req := f.srv.Requests()[0]
	offered := map[string]modeltest.Tool{}
	for _, tl := range req.Tools {
		if !toolNameRE.MatchString(tl.Name) {
			t.Errorf("tool name %q breaks the API's pattern", tl.Name)
		}
		offered[tl.Name] = tl
	}
	for _, want := range []string{"mcp__tracker__echo", "mcp__tracker__danger", "mcp__tracker__big", "mcp__tracker__fail", "mcp__tracker__leak"} {
		if _, ok := offered[want]; !ok {
			t.Errorf("%s not offered; offered %v", want, req.Tools)
		}
	}
	if _, ok := offered["mcp__tracker__slow"]; ok {
		t.Error("the disabled tool slow was offered")
	}
	if !strings.Contains(string(offered["mcp__tracker__echo"].InputSchema), `"text"`) {
		t.Errorf("echo's schema %s", offered["mcp__tracker__echo"].InputSchema)
	}

	results := map[string]apitype.AgentMCPToolResult{}
	uses := map[string]apitype.AgentMCPToolUse{}
	for _, e := range evs {
		switch e.Type {
		case mcpUse:
			uses[e.ID] = decode[apitype.AgentMCPToolUse](t, e)
		case mcpResult:
			res := decode[apitype.AgentMCPToolResult](t, e)
			results[uses[res.MCPToolUseID].Name] = res
		case toolUse, toolResult:
			t.Errorf("an MCP call logged as %s", e.Type)
		}
	}
	if len(uses) != 5 || len(results) != 5 {
		t.Fatalf("%d uses, %d results; log %v", len(uses), len(results), types(evs))
	}
	text := func(name string) string {
		var sb strings.Builder
		for _, c := range results[name].Content {
			sb.WriteString(c.Text)
		}
		return sb.String()
	}
	if text("echo") != "echo: hi" || results["echo"].IsError {
		t.Errorf("echo result %+v", results["echo"])
	}
	if text("danger") != "danger done" || r.srv.Calls("danger") != 1 {
		t.Errorf("danger result %+v, %d calls", results["danger"], r.srv.Calls("danger"))
	}
	if big := text("big"); len(big) > harness.MaxMCPResult+200 || !strings.Contains(big, "[output truncated: 102400 of 307200 bytes shown]") {
		t.Errorf("big result: %d bytes, ends %q", len(big), big[max(0, len(big)-80):])
	}
	if !results["fail"].IsError || text("fail") != "the tracker is read-only today" {
		t.Errorf("fail result %+v", results["fail"])
	}
	if !strings.Contains(text("leak"), "[redacted]") {
		t.Errorf("leak result %q", text("leak"))
	}
	for _, u := range uses {
		if u.Name == "danger" {
			continue
		}
		if u.EvaluatedPermission != apitype.PermissionAllow || u.Evaluation == nil || u.Evaluation.Type != apitype.PolicyAlwaysAllow {
			t.Errorf("use %+v", u)
		}
	}
	// The model saw the echo result as the answer to its call.
	if tr := lastToolResult(t, f.srv.Requests()[1]); tr.ToolUseID != "toolu_echo" || tr.IsError || blockText(tr) != "echo: hi" {
		t.Errorf("model saw %+v", tr)
	}
	if n := r.srv.TokenRequests.Load(); n != 1 {
		t.Errorf("%d token requests, want 1 (the refresh before expiry)", n)
	}

	// A 401 mid-session: the proxy refreshes the token and the call goes through.
	r.srv.ExpireAll()
	f.srv.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{ID: "toolu_echo2", Name: "mcp__tracker__echo", Input: `{"text":"again"}`}}},
		modeltest.Turn{Text: "Still fine."},
	)
	f.say(id, "Once more.")
	evs = f.waitIdle(id, 3)
	res := decode[apitype.AgentMCPToolResult](t, evs[len(evs)-6])
	if evs[len(evs)-6].Type != mcpResult || res.IsError || len(res.Content) == 0 || res.Content[0].Text != "echo: again" {
		t.Fatalf("after the 401: %s %+v; log %v", evs[len(evs)-6].Type, res, types(evs))
	}
	if n := r.srv.TokenRequests.Load(); n != 2 || r.srv.Unauthorized.Load() == 0 {
		t.Errorf("%d token requests, %d 401s after the expiry", n, r.srv.Unauthorized.Load())
	}
	r.redTeam(t, id)
}

// TestMCPToolNames: MCP tool names never collide with custom tools and stay within the API's 64 characters.
func TestMCPToolNames(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := newMCPRig(t, f, mcptest.Config{ClientID: "corral"})
	f.srv.Script(modeltest.Turn{Text: "Looked."})
	long := strings.Repeat("very-long-server-name.", 10)
	servers := []apitype.MCPServer{{Type: apitype.MCPServerURL, Name: "tracker", URL: r.srv.MCPURL}, {Type: apitype.MCPServerURL, Name: long, URL: r.srv.MCPURL}}
	allow := &apitype.ToolDefaults{Enabled: true, PermissionPolicy: apitype.PermissionPolicy{Type: apitype.PolicyAlwaysAllow}}
	tools := []apitype.Tool{
		{Type: apitype.ToolTypeCustom, Name: "mcp__tracker__echo", Description: "a custom tool", InputSchema: json.RawMessage(`{"type":"object"}`)},
		{Type: apitype.ToolTypeMCPToolset, MCPServerName: "tracker", DefaultConfig: allow},
		{Type: apitype.ToolTypeMCPToolset, MCPServerName: long, DefaultConfig: allow},
	}
	f.start(r.config())
	id := r.session(t, servers, tools, r.oauthVault(t, r.srv.MCPURL))
	f.say(id, "Look.")
	f.waitIdle(id, 1)
	req := f.srv.Requests()[0]
	seen := map[string]bool{}
	custom, hashedEcho := 0, 0
	for _, tl := range req.Tools {
		if !toolNameRE.MatchString(tl.Name) {
			t.Errorf("tool name %q breaks the API's pattern", tl.Name)
		}
		if seen[tl.Name] {
			t.Errorf("tool name %q offered twice", tl.Name)
		}
		seen[tl.Name] = true
		switch {
		case tl.Name == "mcp__tracker__echo":
			if tl.Description != "a custom tool" {
				t.Errorf("the custom tool's name went to %q", tl.Description)
			}
			custom++
		case strings.HasPrefix(tl.Name, "mcp__tracker__echo_"):
			hashedEcho++
		}
	}
	if custom != 1 || hashedEcho != 1 || len(req.Tools) != 13 {
		t.Errorf("custom %d, hashed echo %d, %d tools: %v", custom, hashedEcho, len(req.Tools), slices.Collect(func(yield func(string) bool) {
			for _, tl := range req.Tools {
				if !yield(tl.Name) {
					return
				}
			}
		}))
	}
}

// TestMCPServerErrors: a server that cannot be reached is a session.error mcp_connection_failed_error naming
// it (its tools are not offered, the turn goes on); one whose credential is refused is
// mcp_authentication_failed_error; neither carries a token.
func TestMCPServerErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := newMCPRig(t, f, mcptest.Config{ClientID: "corral"})
	f.srv.Script(modeltest.Turn{Text: "No tracker today."})
	allow := &apitype.ToolDefaults{Enabled: true, PermissionPolicy: apitype.PermissionPolicy{Type: apitype.PolicyAlwaysAllow}}
	servers := []apitype.MCPServer{
		{Type: apitype.MCPServerURL, Name: "down", URL: "http://127.0.0.1:1/mcp"},
		{Type: apitype.MCPServerURL, Name: "locked", URL: r.srv.MCPURL},
	}
	tools := []apitype.Tool{
		{Type: apitype.ToolTypeMCPToolset, MCPServerName: "down", DefaultConfig: allow},
		{Type: apitype.ToolTypeMCPToolset, MCPServerName: "locked", DefaultConfig: allow},
	}
	vid := r.oauthVault(t, r.srv.MCPURL)
	r.srv.ExpireAll()
	f.start(r.config())
	id := r.session(t, servers, tools, vid)
	// Break the credential's client id so that the refresh fails.
	ctx := context.Background()
	list, err := f.store.CredentialList(ctx, &store.CredentialListParams{VaultID: vid})
	if err != nil || len(list) != 1 {
		t.Fatal(list, err)
	}
	if _, err := f.store.CredentialUpdate(ctx, &store.CredentialUpdateParams{CredentialRef: store.CredentialRef{VaultID: vid, ID: list[0].ID},
		Update: func(c *apitype.Credential) ([]store.SealedSecret, error) {
			c.Auth.Refresh.ClientID = "wrong"
			return nil, nil
		}}); err != nil {
		t.Fatal(err)
	}
	f.say(id, "Check the tracker.")
	evs := f.waitIdle(id, 1)
	got := map[string]apitype.SessionErrorType{}
	for _, e := range evs {
		if e.Type == sessErr {
			se := decode[apitype.SessionError](t, e)
			got[se.Error.MCPServerName] = se.Error.Type
			reason := apitype.ReasonConnectionFailed
			if se.Error.Type == apitype.SessionErrMCPAuthentication {
				reason = apitype.ReasonAuth
			}
			want := apitype.FailureSource{Component: apitype.ComponentProxy, Backend: se.Error.MCPServerName, Reason: reason}
			if src := se.Error.Source; src == nil || *src != want {
				t.Errorf("%s: source %+v, want %+v", se.Error.MCPServerName, src, want)
			}
		}
	}
	if got["down"] != apitype.SessionErrMCPConnection || got["locked"] != apitype.SessionErrMCPAuthentication {
		t.Errorf("session errors %v; log %v", got, types(evs))
	}
	assertStop(t, evs[len(evs)-1], apitype.StopEndTurn)
	if len(f.srv.Requests()[0].Tools) != 0 {
		t.Errorf("tools of failed servers offered: %v", f.srv.Requests()[0].Tools)
	}
	r.redTeam(t, id)
}

// TestMCPCrashMidCall: a brain that dies while an MCP tool runs leaves the call to the next brain, which closes
// it with an error result saying its outcome is unknown and never calls the tool again.
func TestMCPCrashMidCall(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := newMCPRig(t, f, mcptest.Config{ClientID: "corral"})
	cs := &crashable{Store: f.store}
	f.srv.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{ID: "toolu_slow", Name: "mcp__tracker__slow", Input: `{}`}}},
		modeltest.Turn{Text: "I will check what the slow call did."},
	)
	allow := &apitype.ToolDefaults{Enabled: true, PermissionPolicy: apitype.PermissionPolicy{Type: apitype.PolicyAlwaysAllow}}
	servers := []apitype.MCPServer{{Type: apitype.MCPServerURL, Name: "tracker", URL: r.srv.MCPURL}}
	tools := []apitype.Tool{{Type: apitype.ToolTypeMCPToolset, MCPServerName: "tracker", DefaultConfig: allow}}
	cfgA := r.config()
	cfgA.Store, cfgA.LeaseTTL, cfgA.Owner, cfgA.Workers = cs, 300*time.Millisecond, "brain-a", 1
	f.start(cfgA)
	id := r.session(t, servers, tools, r.oauthVault(t, r.srv.MCPURL))
	f.say(id, "Run the slow one.")
	f.waitFor(id, "brain A's MCP call", func([]apitype.Event) bool { return r.srv.Calls("slow") == 1 })
	cs.dead.Store(true) // brain A dies while the tool runs
	defer func() {
		select {
		case <-r.srv.Release:
		default:
			close(r.srv.Release) // a failed assertion must not leave the slow call holding the server
		}
	}()

	// Brain B's own lease is long: under load a 300 ms one can lapse between renewals, and B's next claim of
	// its own turn is then (rightly) a second crash_recovered error.
	cfgB := r.config()
	cfgB.Owner, cfgB.LeaseTTL = "brain-b", 5*time.Second
	f.start(cfgB)
	evs := f.waitIdle(id, 1)
	assertTypes(t, evs, userMsg, running, start, mcpUse, end, usage, sessErr, mcpResult, start, agentMsg, end, usage, idle)
	assertRecovered(t, evs[6])
	res := decode[apitype.AgentMCPToolResult](t, evs[7])
	if !res.IsError || res.MCPToolUseID != evs[3].ID || !strings.Contains(res.Content[0].Text, "outcome is unknown") {
		t.Errorf("result at takeover = %+v", res)
	}
	if n := r.srv.Calls("slow"); n != 1 {
		t.Errorf("the slow tool ran %d times", n)
	}
	if tr := lastToolResult(t, f.srv.Requests()[1]); tr.ToolUseID != "toolu_slow" || !tr.IsError || !strings.Contains(blockText(tr), "outcome is unknown") {
		t.Errorf("model saw %+v", tr)
	}
}

// TestMCPDenied: an always_ask MCP call the user denies never reaches the server; its agent.mcp_tool_result says
// so with the user's message, and the model goes on.
func TestMCPDenied(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := newMCPRig(t, f, mcptest.Config{ClientID: "corral"})
	f.srv.Script(
		modeltest.Turn{ToolUses: []modeltest.ToolUse{{ID: "toolu_d", Name: "mcp__tracker__danger", Input: `{}`}}},
		modeltest.Turn{Text: "Understood, I will not."},
	)
	servers := []apitype.MCPServer{{Type: apitype.MCPServerURL, Name: "tracker", URL: r.srv.MCPURL}}
	tools := []apitype.Tool{{Type: apitype.ToolTypeMCPToolset, MCPServerName: "tracker"}} // default: always_ask
	f.start(r.config())
	id := r.session(t, servers, tools, r.oauthVault(t, r.srv.MCPURL))
	f.say(id, "Do the dangerous thing.")
	evs := f.waitIdle(id, 1)
	reason := stopReason(t, evs[len(evs)-1])
	if reason.Type != apitype.StopRequiresAction || len(reason.EventIDs) != 1 {
		t.Fatalf("idle %+v; log %v", reason, types(evs))
	}
	f.send(id, confirm, apitype.UserToolConfirmation{ToolUseID: reason.EventIDs[0], Result: apitype.ConfirmDeny, DenyMessage: "not today"})
	evs = f.waitIdle(id, 2)
	var res apitype.AgentMCPToolResult
	for _, e := range evs {
		if e.Type == mcpResult {
			res = decode[apitype.AgentMCPToolResult](t, e)
		}
	}
	if res.MCPToolUseID != reason.EventIDs[0] || !res.IsError || !strings.Contains(res.Content[0].Text, "not today") {
		t.Errorf("result %+v; log %v", res, types(evs))
	}
	if r.srv.Calls("danger") != 0 {
		t.Error("the denied call reached the server")
	}
	if tr := lastToolResult(t, f.srv.Requests()[1]); tr.ToolUseID != "toolu_d" || !tr.IsError {
		t.Errorf("model saw %+v", tr)
	}
}

// TestMCPMissingCredentialOnce: a server that refuses a session with no credential for it is reported once per
// session, naming the server's URL and what credential would match, not at every turn; its tools are not
// offered, and the report says so.
func TestMCPMissingCredentialOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := newMCPRig(t, f, mcptest.Config{ClientID: "corral"})
	f.srv.Script(modeltest.Turn{Text: "No tracker today."}, modeltest.Turn{Text: "Still no tracker."}, modeltest.Turn{Text: "Nor now."})
	allow := &apitype.ToolDefaults{Enabled: true, PermissionPolicy: apitype.PermissionPolicy{Type: apitype.PolicyAlwaysAllow}}
	servers := []apitype.MCPServer{{Type: apitype.MCPServerURL, Name: "locked", URL: r.srv.MCPURL}}
	tools := []apitype.Tool{{Type: apitype.ToolTypeMCPToolset, MCPServerName: "locked", DefaultConfig: allow}}
	f.start(r.config())
	id := r.session(t, servers, tools) // no vault
	for i, text := range []string{"Check the tracker.", "Try again.", "Once more."} {
		f.say(id, text)
		f.waitIdle(id, i+1)
	}
	var reports []apitype.SessionErrorBody
	for _, e := range f.events(id) {
		if e.Type == sessErr {
			reports = append(reports, decode[apitype.SessionError](t, e).Error)
		}
	}
	if len(reports) != 1 {
		t.Fatalf("%d session errors over 3 turns, want 1: %+v", len(reports), reports)
	}
	se := reports[0]
	if se.Type != apitype.SessionErrMCPAuthentication || se.MCPServerName != "locked" {
		t.Errorf("report %+v", se)
	}
	for _, want := range []string{r.srv.MCPURL, "no credential", "mcp_server_url", "not offered to the model"} {
		if !strings.Contains(se.Message, want) {
			t.Errorf("report %q does not say %q", se.Message, want)
		}
	}
	for i, req := range f.srv.Requests() {
		if len(req.Tools) != 0 {
			t.Errorf("request %d offered %v", i, req.Tools)
		}
	}
}
