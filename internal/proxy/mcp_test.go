package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/mcp"
	"github.com/corralhq/corral/internal/mcp/mcptest"
	"github.com/corralhq/corral/internal/mcp/remote"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
)

// mcpFixture is a real store and vault, a real MCP server (official SDK) on 127.0.0.1 and the MCP proxy,
// trusting the server's internal address as the operator would with --egress-allow-internal.
type mcpFixture struct {
	*fixture
	srv   *mcptest.Server
	proxy *MCP
	logs  *bytes.Buffer
	logMu *sync.Mutex
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func newMCPFixture(t *testing.T, cfg mcptest.Config) *mcpFixture {
	t.Helper()
	st, err := sqlite.Open(context.Background(), "sqlite://"+t.TempDir()+"/corral.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f := &mcpFixture{fixture: newFixture(t, st), srv: mcptest.New(t, cfg), logs: &bytes.Buffer{}, logMu: &sync.Mutex{}}
	u, _ := url.Parse(f.srv.URL)
	logger := slog.New(slog.NewTextHandler(lockedWriter{f.logMu, f.logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	f.proxy, err = NewMCP(MCPConfig{Store: st, Vault: f.v, AllowInternal: []string{u.Host}, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.proxy.Close() })
	return f
}

// mcpSession creates an environment of networking n and a session whose agent has the servers, with the vaults.
func (f *mcpFixture) mcpSession(t *testing.T, n *apitype.Networking, servers []apitype.MCPServer, vaults ...string) string {
	t.Helper()
	now := apitype.Now()
	id := apitype.NewID(apitype.PrefixEnvironment)
	env := &apitype.Environment{Type: apitype.ObjectEnvironment, ID: id, Name: id,
		Config: apitype.EnvConfig{Type: apitype.EnvironmentCloud, Networking: n}, Metadata: map[string]string{}, CreatedAt: now, UpdatedAt: now}
	if err := f.st.EnvironmentCreate(f.ctx, env); err != nil {
		t.Fatal(err)
	}
	s := &apitype.Session{Type: apitype.ObjectSession, ID: apitype.NewID(apitype.PrefixSession), EnvironmentID: env.ID,
		Status: apitype.StatusIdle, Agent: apitype.SessionAgent{Type: apitype.ObjectAgent, ID: "agent_x", Version: 1, Name: "a", MCPServers: servers},
		VaultIDs: vaults, Metadata: map[string]string{}, CreatedAt: now, UpdatedAt: now}
	if _, _, err := f.st.SessionCreate(f.ctx, &store.SessionCreateParams{Session: s}); err != nil {
		t.Fatal(err)
	}
	return s.ID
}

// oauthCredential creates an mcp_oauth credential for url with its access and refresh tokens and the client secret.
func (f *mcpFixture) oauthCredential(t *testing.T, vid, mcpURL, access, refresh string, expires *time.Time, cfg mcptest.Config) string {
	t.Helper()
	now := apitype.Now()
	auth := apitype.CredentialAuth{Type: apitype.AuthMCPOAuth, MCPServerURL: mcpURL, ExpiresAt: expires}
	if refresh != "" {
		res, scope := "https://tracker.example/", "issues:read"
		auth.Refresh = &apitype.OAuthRefresh{ClientID: cfg.ClientID, TokenEndpoint: f.srv.TokenURL,
			TokenEndpointAuth: apitype.TokenEndpointAuth{Type: cfg.TokenAuth}, Resource: &res, Scope: &scope}
	}
	c := &apitype.Credential{Type: apitype.ObjectCredential, ID: apitype.NewID(apitype.PrefixCredential), VaultID: vid,
		Metadata: map[string]string{}, Auth: auth, CreatedAt: now, UpdatedAt: now}
	var secrets []store.SealedSecret
	for name, v := range map[string]string{secretAccessToken: access, secretRefreshToken: refresh, secretClientSecret: cfg.ClientSecret} {
		if v == "" {
			continue
		}
		s, err := f.v.Seal(c.ID, name, []byte(v))
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, *s)
	}
	if err := f.st.CredentialCreate(f.ctx, &store.CredentialCreateParams{Credential: c, MatchKey: mcpURL, Secrets: secrets}); err != nil {
		t.Fatal(err)
	}
	return c.ID
}

func (f *mcpFixture) checkNoSecret(t *testing.T, where string, text string) {
	t.Helper()
	for _, s := range f.srv.Secrets() {
		if strings.Contains(text, s) {
			t.Errorf("%s holds the secret %s…: %s", where, s[:10], text)
		}
	}
}

func (f *mcpFixture) checkLogs(t *testing.T) {
	t.Helper()
	f.logMu.Lock()
	logs := f.logs.String()
	f.logMu.Unlock()
	f.checkNoSecret(t, "the proxy's log", logs)
}

func resultText(r *mcp.Result) string {
	var b strings.Builder
	for _, c := range r.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestMCPStaticBearer lists and calls tools of a real MCP server over Streamable HTTP and, for a server that only
// speaks it, the older HTTP+SSE transport, with a static_bearer credential the proxy picks by mcp_server_url
// (spelled differently: a trailing slash and an upper-case host). A hostile tool that echoes the Authorization
// header gets it scrubbed; a failing tool and an unknown tool are error results, not failures.
func TestMCPStaticBearer(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{"streamable", "sse"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			f := newMCPFixture(t, mcptest.Config{})
			ctx := testCtx(t)
			endpoint := f.srv.MCPURL
			if transport == "sse" {
				endpoint = f.srv.SSEURL
			}
			tok := f.srv.IssueAccess()
			vid := f.vault(t)
			f.credential(t, vid, apitype.CredentialAuth{Type: apitype.AuthStaticBearer, MCPServerURL: strings.Replace(endpoint, "127.0.0.1", "127.0.0.1", 1) + "/"}, tok)
			server := apitype.MCPServer{Type: apitype.MCPServerURL, Name: "tracker", URL: endpoint}
			sid := f.mcpSession(t, nil, []apitype.MCPServer{server}, vid)

			tools, err := f.proxy.ListTools(ctx, sid, server)
			if err != nil {
				t.Fatal(err)
			}
			names := map[string]mcp.Tool{}
			for _, tl := range tools {
				names[tl.Name] = tl
			}
			echo, ok := names["echo"]
			if !ok || len(tools) != 6 {
				t.Fatalf("tools %v", tools)
			}
			var schema struct {
				Properties map[string]any `json:"properties"`
			}
			if err := json.Unmarshal(echo.InputSchema, &schema); err != nil || schema.Properties["text"] == nil {
				t.Errorf("echo schema %s (%v)", echo.InputSchema, err)
			}
			res, err := f.proxy.CallTool(ctx, sid, server, "echo", json.RawMessage(`{"text":"hi"}`))
			if err != nil || res.IsError || resultText(res) != "echo: hi" {
				t.Fatalf("echo: %+v, %v", res, err)
			}
			res, err = f.proxy.CallTool(ctx, sid, server, "leak", json.RawMessage(`{}`))
			// Over SSE the SDK does not hand the tool the POST's headers; over Streamable HTTP it does.
			if err != nil || (transport == "streamable" && !strings.Contains(resultText(res), "Bearer [redacted]")) {
				t.Fatalf("leak: %+v, %v", res, err)
			}
			f.checkNoSecret(t, "the leak tool's result", resultText(res))
			res, err = f.proxy.CallTool(ctx, sid, server, "fail", json.RawMessage(`{}`))
			if err != nil || !res.IsError || resultText(res) != "the tracker is read-only today" {
				t.Fatalf("fail: %+v, %v", res, err)
			}
			res, err = f.proxy.CallTool(ctx, sid, server, "no_such_tool", json.RawMessage(`{}`))
			if err != nil || !res.IsError || !strings.Contains(resultText(res), "no_such_tool") {
				t.Fatalf("unknown tool: %+v, %v", res, err)
			}
			if f.srv.Calls("echo") != 1 || f.srv.Calls("fail") != 1 {
				t.Errorf("calls echo %d fail %d", f.srv.Calls("echo"), f.srv.Calls("fail"))
			}
			f.checkLogs(t)
		})
	}
}

// TestMCPToolListChanged: the tool list is cached per session, and listed again once the server says it changed.
func TestMCPToolListChanged(t *testing.T) {
	t.Parallel()
	f := newMCPFixture(t, mcptest.Config{})
	ctx := testCtx(t)
	vid := f.vault(t)
	f.credential(t, vid, apitype.CredentialAuth{Type: apitype.AuthStaticBearer, MCPServerURL: f.srv.MCPURL}, f.srv.IssueAccess())
	server := apitype.MCPServer{Type: apitype.MCPServerURL, Name: "tracker", URL: f.srv.MCPURL}
	sid := f.mcpSession(t, nil, []apitype.MCPServer{server}, vid)
	tools, err := f.proxy.ListTools(ctx, sid, server)
	if err != nil || len(tools) != 6 {
		t.Fatalf("tools %v, %v", tools, err)
	}
	f.srv.AddTool("triage")
	// The notification arrives on the session's stream; the list is fresh once it has.
	for {
		tools, err = f.proxy.ListTools(ctx, sid, server)
		if err != nil {
			t.Fatal(err)
		}
		if len(tools) == 7 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the new tool never showed: %v", tools)
		}
		time.Sleep(20 * time.Millisecond)
	}
	res, err := f.proxy.CallTool(ctx, sid, server, "triage", json.RawMessage(`{}`))
	if err != nil || resultText(res) != "triage ran" {
		t.Fatalf("triage: %+v, %v", res, err)
	}
}

// TestMCPOAuthRefresh refreshes an mcp_oauth credential at its token endpoint, with each client authentication
// method, before it expires and on a 401, and seals the new tokens back; concurrent refreshes of one credential
// (eight sessions sharing it) make one request.
func TestMCPOAuthRefresh(t *testing.T) {
	t.Parallel()
	for _, auth := range []apitype.TokenEndpointAuthType{apitype.TokenAuthNone, apitype.TokenAuthClientSecretBasic,
		apitype.TokenAuthClientSecretPost} {
		t.Run(string(auth), func(t *testing.T) {
			t.Parallel()
			cfg := mcptest.Config{ClientID: "corral-client", TokenAuth: auth, RotateRefresh: true}
			if auth != apitype.TokenAuthNone {
				cfg.ClientSecret = "client-secret-" + string(auth)
			}
			f := newMCPFixture(t, cfg)
			ctx := testCtx(t)
			vid := f.vault(t)
			server := apitype.MCPServer{Type: apitype.MCPServerURL, Name: "tracker", URL: f.srv.MCPURL}

			// Before expiry: the token expires within the refresh margin.
			soon := time.Now().Add(20 * time.Second).UTC()
			old := f.srv.IssueAccess()
			cid := f.oauthCredential(t, vid, f.srv.MCPURL, old, f.srv.IssueRefresh(), &soon, cfg)
			sid := f.mcpSession(t, nil, []apitype.MCPServer{server}, vid)
			if _, err := f.proxy.ListTools(ctx, sid, server); err != nil {
				t.Fatal(err)
			}
			if n := f.srv.TokenRequests.Load(); n != 1 {
				t.Fatalf("%d token requests before expiry, want 1", n)
			}
			form := f.srv.TokenForms()[0]
			if form["grant_type"] != "refresh_token" || form["resource"] != "https://tracker.example/" || form["scope"] != "issues:read" {
				t.Errorf("token request %v", form)
			}
			switch auth {
			case "client_secret_basic":
				if form["authorization"] != "basic corral-client" || form["client_secret"] != "" {
					t.Errorf("basic auth: %v", form)
				}
			case "client_secret_post":
				if form["client_id"] != "corral-client" || form["client_secret"] != cfg.ClientSecret {
					t.Errorf("post auth: %v", form)
				}
			default:
				if form["client_id"] != "corral-client" || form["authorization"] != "" {
					t.Errorf("none auth: %v", form)
				}
			}
			c, err := f.st.CredentialGet(ctx, &store.CredentialRef{VaultID: vid, ID: cid})
			if err != nil {
				t.Fatal(err)
			}
			if c.Auth.ExpiresAt == nil || time.Until(*c.Auth.ExpiresAt) < 50*time.Minute {
				t.Errorf("expires_at after refresh: %v", c.Auth.ExpiresAt)
			}
			sealed, err := f.st.SecretList(ctx, &store.SecretListParams{CredentialID: cid})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range sealed {
				if bytes.Contains(s.Ciphertext, []byte("mcp-")) {
					t.Errorf("secret %s stored in the clear", s.Name)
				}
				plain, err := f.v.Open(&s)
				if err != nil {
					t.Fatal(err)
				}
				if s.Name == secretAccessToken && string(plain) == old {
					t.Error("the refreshed access token was not sealed back")
				}
			}

			// On a 401: the server stops accepting the token early; eight sessions share the credential.
			f.srv.ExpireAll()
			var sids []string
			for range 8 {
				sids = append(sids, f.mcpSession(t, nil, []apitype.MCPServer{server}, vid))
			}
			var wg sync.WaitGroup
			errs := make(chan error, len(sids))
			for _, s := range sids {
				wg.Go(func() {
					res, err := f.proxy.CallTool(ctx, s, server, "echo", json.RawMessage(`{"text":"after 401"}`))
					if err == nil && resultText(res) != "echo: after 401" {
						err = fmt.Errorf("result %+v", res)
					}
					errs <- err
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Error(err)
				}
			}
			if n := f.srv.TokenRequests.Load(); n != 2 {
				t.Errorf("%d token requests after the 401s of 8 sessions, want 2 (one refresh each time)", n)
			}
			if f.srv.Unauthorized.Load() == 0 {
				t.Error("the server never answered 401: the test did not test the refresh on 401")
			}
			f.checkLogs(t)
		})
	}
}

// TestMCPAuthenticationFailed: a 401 that refresh cannot fix (the refresh token revoked, the endpoint echoing
// it) is an authentication error naming the server, with no secret in its message or the logs; a session with
// no matching credential gets one too.
func TestMCPAuthenticationFailed(t *testing.T) {
	t.Parallel()
	cfg := mcptest.Config{ClientID: "corral-client", TokenAuth: apitype.TokenAuthClientSecretPost, ClientSecret: "client-secret-xyz"}
	f := newMCPFixture(t, cfg)
	ctx := testCtx(t)
	vid := f.vault(t)
	server := apitype.MCPServer{Type: apitype.MCPServerURL, Name: "tracker", URL: f.srv.MCPURL}
	stale := f.srv.IssueAccess()
	f.srv.Expire(stale)
	f.oauthCredential(t, vid, f.srv.MCPURL, stale, "mcp-rt-revoked-0123456789", nil, cfg)
	sid := f.mcpSession(t, nil, []apitype.MCPServer{server}, vid)
	_, err := f.proxy.ListTools(ctx, sid, server)
	var me *mcp.Error
	if !errors.As(err, &me) || me.Kind != mcp.KindAuthentication || me.Server != "tracker" {
		t.Fatalf("err %v", err)
	}
	if !strings.Contains(me.Message, "refreshing it failed") || strings.Contains(me.Message, "mcp-rt-revoked") {
		t.Errorf("message %q", me.Message)
	}
	f.checkNoSecret(t, "the error", me.Error())

	other := f.mcpSession(t, nil, []apitype.MCPServer{server})
	_, err = f.proxy.ListTools(ctx, other, server)
	if !errors.As(err, &me) || me.Kind != mcp.KindAuthentication || !strings.Contains(me.Message, "no credential") {
		t.Fatalf("without a credential: %v", err)
	}
	f.checkLogs(t)
	f.logMu.Lock()
	defer f.logMu.Unlock()
	if strings.Contains(f.logs.String(), "mcp-rt-revoked") {
		t.Error("the revoked refresh token is in the logs")
	}
}

// TestMCPConnectionFailures: an unreachable server, a destination the environment's networking refuses (limited
// without allow_mcp_servers), one it allows (allow_mcp_servers), an internal address the operator does not
// trust, a server that hangs, and a server that answers garbage are connection errors naming the server; none
// wedges, and a call that hangs ends with its context.
func TestMCPConnectionFailures(t *testing.T) {
	t.Parallel()
	f := newMCPFixture(t, mcptest.Config{})
	ctx := testCtx(t)
	vid := f.vault(t)
	tok := f.srv.IssueAccess()
	f.credential(t, vid, apitype.CredentialAuth{Type: apitype.AuthStaticBearer, MCPServerURL: f.srv.MCPURL}, tok)
	server := apitype.MCPServer{Type: apitype.MCPServerURL, Name: "tracker", URL: f.srv.MCPURL}
	kind := func(err error) string {
		var me *mcp.Error
		if !errors.As(err, &me) {
			return fmt.Sprintf("not an mcp.Error: %v", err)
		}
		f.checkNoSecret(t, "an error", me.Error())
		return me.Kind
	}

	yes, no := true, false
	limited := f.mcpSession(t, &apitype.Networking{Type: apitype.NetworkingLimited, AllowMCPServers: &no}, []apitype.MCPServer{server}, vid)
	_, err := f.proxy.ListTools(ctx, limited, server)
	if kind(err) != mcp.KindConnection || !strings.Contains(err.Error(), "networking") {
		t.Errorf("limited networking without allow_mcp_servers: %v", err)
	}
	allowed := f.mcpSession(t, &apitype.Networking{Type: apitype.NetworkingLimited, AllowMCPServers: &yes}, []apitype.MCPServer{server}, vid)
	if _, err := f.proxy.ListTools(ctx, allowed, server); err != nil {
		t.Errorf("limited networking with allow_mcp_servers: %v", err)
	}
	u, _ := url.Parse(f.srv.URL)
	byHost := f.mcpSession(t, &apitype.Networking{Type: apitype.NetworkingLimited, AllowedHosts: []string{u.Hostname()}}, []apitype.MCPServer{server}, vid)
	if _, err := f.proxy.ListTools(ctx, byHost, server); err != nil {
		t.Errorf("limited networking with the host in allowed_hosts: %v", err)
	}

	// The operator trusts only the test server's host:port: another local port stays refused.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var hangs sync.WaitGroup
	t.Cleanup(func() { l.Close(); hangs.Wait() })
	hangs.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			hangs.Go(func() { // reads and never answers
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
				}
			})
		}
	})
	untrusted := apitype.MCPServer{Type: apitype.MCPServerURL, Name: "private", URL: "http://" + l.Addr().String() + "/mcp"}
	s2 := f.mcpSession(t, nil, []apitype.MCPServer{untrusted}, vid)
	_, err = f.proxy.ListTools(ctx, s2, untrusted)
	if kind(err) != mcp.KindConnection || !strings.Contains(err.Error(), "internal address") {
		t.Errorf("an untrusted internal address: %v", err)
	}

	// A server that hangs: trusted, so the proxy connects, and the attempt ends with its context.
	p2, err := NewMCP(MCPConfig{Store: f.st, Vault: f.v, AllowInternal: []string{l.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = p2.ListTools(short, s2, untrusted)
	cancel()
	if kind(err) != mcp.KindConnection {
		t.Errorf("a hanging server: %v", err)
	}

	// Unreachable: a port nothing listens on.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	p3, err := NewMCP(MCPConfig{Store: f.st, Vault: f.v, AllowInternal: []string{deadAddr}})
	if err != nil {
		t.Fatal(err)
	}
	defer p3.Close()
	unreachable := apitype.MCPServer{Type: apitype.MCPServerURL, Name: "gone", URL: "http://" + deadAddr + "/mcp"}
	s3 := f.mcpSession(t, nil, []apitype.MCPServer{unreachable}, vid)
	if _, err := p3.CallTool(ctx, s3, unreachable, "echo", json.RawMessage(`{}`)); kind(err) != mcp.KindConnection {
		t.Errorf("an unreachable server: %v", err)
	}

	// A server the session's agent does not have is refused.
	if _, err := f.proxy.ListTools(ctx, limited, untrusted); kind(err) != mcp.KindConnection {
		t.Errorf("a server outside the agent's mcp_servers: %v", err)
	}
	f.checkLogs(t)
}

// TestMCPMalformedAndRemoved: a server that answers garbage instead of JSON-RPC, or whose TLS certificate cannot
// be verified, is a connection error naming it;
// a tool removed between list and call is an error result; a static token replaced in the vault is picked up
// on the 401 its predecessor gets.
func TestMCPMalformedAndRemoved(t *testing.T) {
	t.Parallel()
	f := newMCPFixture(t, mcptest.Config{})
	ctx := testCtx(t)

	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":`))
	}))
	defer garbage.Close()
	gu, _ := url.Parse(garbage.URL)
	p, err := NewMCP(MCPConfig{Store: f.st, Vault: f.v, AllowInternal: []string{gu.Host}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	bad := apitype.MCPServer{Type: apitype.MCPServerURL, Name: "garbage", URL: garbage.URL + "/mcp"}
	sid := f.mcpSession(t, nil, []apitype.MCPServer{bad})
	_, err = p.ListTools(ctx, sid, bad)
	var me *mcp.Error
	if !errors.As(err, &me) || me.Kind != mcp.KindConnection || me.Server != "garbage" {
		t.Errorf("malformed JSON-RPC: %v", err)
	}

	// TLS the proxy cannot verify (a self-signed certificate): a connection error, nothing sent.
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("a request reached the server whose certificate failed: %s %s", r.Method, r.URL)
	}))
	defer tlsSrv.Close()
	tu, _ := url.Parse(tlsSrv.URL)
	p2, err := NewMCP(MCPConfig{Store: f.st, Vault: f.v, AllowInternal: []string{tu.Host}})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	untrusted := apitype.MCPServer{Type: apitype.MCPServerURL, Name: "selfsigned", URL: tlsSrv.URL + "/mcp"}
	sid = f.mcpSession(t, nil, []apitype.MCPServer{untrusted})
	if _, err := p2.ListTools(ctx, sid, untrusted); !errors.As(err, &me) || me.Kind != mcp.KindConnection || !strings.Contains(me.Message, "certificate") {
		t.Errorf("a TLS failure: %v", err)
	}

	vid := f.vault(t)
	cid := f.credential(t, vid, apitype.CredentialAuth{Type: apitype.AuthStaticBearer, MCPServerURL: f.srv.MCPURL}, f.srv.IssueAccess())
	server := apitype.MCPServer{Type: apitype.MCPServerURL, Name: "tracker", URL: f.srv.MCPURL}
	sid = f.mcpSession(t, nil, []apitype.MCPServer{server}, vid)
	if _, err := f.proxy.ListTools(ctx, sid, server); err != nil {
		t.Fatal(err)
	}
	f.srv.RemoveTool("echo")
	res, err := f.proxy.CallTool(ctx, sid, server, "echo", json.RawMessage(`{"text":"x"}`))
	if err != nil || !res.IsError || !strings.Contains(resultText(res), "echo") {
		t.Errorf("a removed tool: %+v, %v", res, err)
	}

	// The token is replaced through the vault (as the API's credential update does); the old one stops working.
	f.srv.ExpireAll()
	next := f.srv.IssueAccess()
	if _, err := f.st.CredentialUpdate(ctx, &store.CredentialUpdateParams{CredentialRef: store.CredentialRef{VaultID: vid, ID: cid},
		Update: func(c *apitype.Credential) ([]store.SealedSecret, error) {
			s, err := f.v.Seal(c.ID, secretBearerToken, []byte(next))
			if err != nil {
				return nil, err
			}
			return []store.SealedSecret{*s}, nil
		}}); err != nil {
		t.Fatal(err)
	}
	res, err = f.proxy.CallTool(ctx, sid, server, "fail", json.RawMessage(`{}`))
	if err != nil || resultText(res) != "the tracker is read-only today" {
		t.Errorf("after the token was replaced: %+v, %v", res, err)
	}
	f.checkLogs(t)
}

// TestMCPCredentialAddedLater: a session refused for want of a credential succeeds once one is added to its vault.
func TestMCPCredentialAddedLater(t *testing.T) {
	t.Parallel()
	f := newMCPFixture(t, mcptest.Config{})
	ctx := testCtx(t)
	vid := f.vault(t)
	server := apitype.MCPServer{Type: apitype.MCPServerURL, Name: "tracker", URL: f.srv.MCPURL}
	sid := f.mcpSession(t, nil, []apitype.MCPServer{server}, vid)
	var me *mcp.Error
	if _, err := f.proxy.ListTools(ctx, sid, server); !errors.As(err, &me) || me.Kind != mcp.KindAuthentication {
		t.Fatalf("without a credential: %v", err)
	}
	f.credential(t, vid, apitype.CredentialAuth{Type: apitype.AuthStaticBearer, MCPServerURL: f.srv.MCPURL}, f.srv.IssueAccess())
	if tools, err := f.proxy.ListTools(ctx, sid, server); err != nil || len(tools) != 6 {
		t.Fatalf("with the credential added: %v, %v", tools, err)
	}
}

// TestMCPRemote carries the MCP proxy over HTTP (internal/mcp/remote, as corral proxy serves it): tools listed and
// called through the client, an authentication failure passed on with its kind and server, and a caller without
// the token refused.
func TestMCPRemote(t *testing.T) {
	t.Parallel()
	f := newMCPFixture(t, mcptest.Config{})
	ctx := testCtx(t)
	const token = "remote-token-0123456789"
	srv := httptest.NewServer(remote.Handler(f.proxy, token))
	defer srv.Close()
	client := &remote.Client{URL: srv.URL, Token: token, HTTP: srv.Client()}

	vid := f.vault(t)
	f.credential(t, vid, apitype.CredentialAuth{Type: apitype.AuthStaticBearer, MCPServerURL: f.srv.MCPURL}, f.srv.IssueAccess())
	server := apitype.MCPServer{Type: apitype.MCPServerURL, Name: "tracker", URL: f.srv.MCPURL}
	sid := f.mcpSession(t, nil, []apitype.MCPServer{server}, vid)
	tools, err := client.ListTools(ctx, sid, server)
	if err != nil || len(tools) != 6 {
		t.Fatalf("tools %v, %v", tools, err)
	}
	res, err := client.CallTool(ctx, sid, server, "echo", json.RawMessage(`{"text":"remote"}`))
	if err != nil || resultText(res) != "echo: remote" {
		t.Fatalf("echo: %+v, %v", res, err)
	}
	res, err = client.CallTool(ctx, sid, server, "fail", json.RawMessage(`{}`))
	if err != nil || !res.IsError {
		t.Fatalf("fail: %+v, %v", res, err)
	}

	other := f.mcpSession(t, nil, []apitype.MCPServer{server})
	var me *mcp.Error
	if _, err := client.ListTools(ctx, other, server); !errors.As(err, &me) || me.Kind != mcp.KindAuthentication || me.Server != "tracker" {
		t.Errorf("an authentication failure through the remote: %v", err)
	}
	bad := &remote.Client{URL: srv.URL, Token: "wrong-token-0123456789", HTTP: srv.Client()}
	if _, err := bad.ListTools(ctx, sid, server); !errors.As(err, &me) || me.Kind != mcp.KindConnection || !strings.Contains(me.Message, "401") {
		t.Errorf("a wrong token: %v", err)
	}
	if f.srv.Calls("echo") != 1 {
		t.Errorf("echo ran %d times", f.srv.Calls("echo"))
	}
}
