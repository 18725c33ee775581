// This file is the MCP proxy (MCP): the brain's mcp.Client; the package doc is in doc.go.

package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/mcp"
	"github.com/corralhq/corral/internal/sandbox/egress"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/vault"
)

// Names of the sealed secrets of the MCP credentials (as internal/api seals them).
const (
	secretBearerToken  = "token"         // static_bearer
	secretAccessToken  = "access_token"  // mcp_oauth
	secretRefreshToken = "refresh_token" // mcp_oauth with refresh
	secretClientSecret = "client_secret" // mcp_oauth refresh with client_secret_basic or client_secret_post
)

// MCPStore is what the MCP proxy reads and writes: the session, its environment and vaults, their credentials and
// sealed secrets, and the refreshed tokens it seals back.
type MCPStore interface {
	CredentialStore
	EnvironmentGet(ctx context.Context, id string) (*apitype.Environment, error)
	CredentialUpdate(ctx context.Context, p *store.CredentialUpdateParams) (*apitype.Credential, error)
}

// MCPConfig configures MCP.
type MCPConfig struct {
	Store MCPStore     // required
	Vault *vault.Vault // required: opens the tokens and seals the refreshed ones
	// AllowInternal are the host:port pairs the operator trusts although internal (--egress-allow-internal):
	// a private MCP server, or token endpoint, must be one of them.
	AllowInternal []string
	RootCAs       *x509.CertPool // extra CAs to trust besides the system's (--egress-ca-file); nil: system only
	// IdleTimeout closes a session's connection to a server unused this long (default 10 minutes).
	IdleTimeout time.Duration
	// Logger never receives a token. Default discards.
	Logger *slog.Logger
}

// MCP is the MCP proxy: it calls a session's MCP servers with the credential of the session's vaults whose
// mcp_server_url matches the server's URL (Authorization: Bearer), refreshing mcp_oauth tokens before they
// expire and on a 401. It speaks Streamable HTTP, and the older HTTP+SSE transport to a server that only speaks
// that, from this process, under the session environment's networking. Tool lists are cached per session and
// server until the server says they changed. It implements mcp.Client.
type MCP struct {
	cfg MCPConfig

	mu     sync.Mutex
	conns  map[connKey]*mcpConn
	flight map[string]*sync.Mutex // per credential id: one refresh at a time
	closed bool
}

var _ mcp.Client = (*MCP)(nil)

type connKey struct{ session, name, url string }

// NewMCP returns the MCP proxy for cfg.
func NewMCP(cfg MCPConfig) (*MCP, error) {
	if cfg.Store == nil || cfg.Vault == nil {
		return nil, errors.New("proxy: MCP needs a Store and a Vault")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 10 * time.Minute
	}
	return &MCP{cfg: cfg, conns: map[connKey]*mcpConn{}, flight: map[string]*sync.Mutex{}}, nil
}

// Close closes every connection.
func (m *MCP) Close() error {
	m.mu.Lock()
	conns := m.conns
	m.conns, m.closed = map[connKey]*mcpConn{}, true
	m.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
	return nil
}

// ListTools lists the server's tools for the session, from the cache unless the server said they changed.
func (m *MCP) ListTools(ctx context.Context, sessionID string, server apitype.MCPServer) ([]mcp.Tool, error) {
	c, err := m.conn(ctx, sessionID, server)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tools != nil && !c.stale.Load() {
		return slices.Clone(c.tools), nil
	}
	if err := c.connect(ctx); err != nil {
		return nil, err
	}
	c.stale.Store(false)
	var tools []mcp.Tool
	c.authFailed.Store(false)
	for t, err := range c.sess.Tools(ctx, nil) {
		if err != nil {
			return nil, c.fail(ctx, err)
		}
		schema, err := json.Marshal(t.InputSchema)
		if err != nil || string(schema) == "null" {
			schema = json.RawMessage(`{"type":"object"}`)
		}
		tools = append(tools, mcp.Tool{Name: t.Name, Description: t.Description, InputSchema: schema})
		if len(tools) > maxMCPTools {
			return nil, c.errorf(mcp.KindConnection, "the server lists more than %d tools", maxMCPTools)
		}
	}
	if tools == nil {
		tools = []mcp.Tool{}
	}
	c.tools = tools
	return slices.Clone(tools), nil
}

// maxMCPTools bounds the tools one server may list (memory, and the model's tool list).
const maxMCPTools = 1000

// CallTool calls the server's tool for the session. A tool error, or an unknown tool, is an error result.
func (m *MCP) CallTool(ctx context.Context, sessionID string, server apitype.MCPServer, name string, input json.RawMessage) (*mcp.Result, error) {
	c, err := m.conn(ctx, sessionID, server)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.connect(ctx); err != nil {
		return nil, err
	}
	var args map[string]any
	if err := json.Unmarshal(input, &args); err != nil {
		return &mcp.Result{IsError: true, Content: []apitype.ContentBlock{apitype.TextBlock("the tool input is not a JSON object")}}, nil
	}
	c.authFailed.Store(false)
	res, err := c.sess.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		if werr, ok := errors.AsType[*jsonrpc.Error](err); ok && ctx.Err() == nil {
			// The server answered with a JSON-RPC error (an unknown tool, bad arguments): the model can act on it.
			return &mcp.Result{IsError: true, Content: []apitype.ContentBlock{apitype.TextBlock(c.scrub("the MCP server answered with an error: " + werr.Message))}}, nil
		}
		return nil, c.fail(ctx, err)
	}
	return &mcp.Result{IsError: res.IsError, Content: c.content(res)}, nil
}

// content converts a tool result to session event content, with the token scrubbed from its text.
func (c *mcpConn) content(res *sdk.CallToolResult) []apitype.ContentBlock {
	var out []apitype.ContentBlock
	for _, item := range res.Content {
		switch v := item.(type) {
		case *sdk.TextContent:
			out = append(out, apitype.TextBlock(c.scrub(v.Text)))
		case *sdk.ImageContent:
			src, _ := json.Marshal(apitype.ImageSource{Type: "base64", MediaType: v.MIMEType, Data: base64.StdEncoding.EncodeToString(v.Data)})
			out = append(out, apitype.ContentBlock{Type: "image", Source: src})
		case *sdk.ResourceLink:
			out = append(out, apitype.TextBlock(fmt.Sprintf("[resource link %s: %s]", v.Name, v.URI)))
		case *sdk.EmbeddedResource:
			if v.Resource != nil && v.Resource.Text != "" {
				out = append(out, apitype.TextBlock(c.scrub(v.Resource.Text)))
			} else if v.Resource != nil {
				out = append(out, apitype.TextBlock(fmt.Sprintf("[embedded resource %s (%s)]", v.Resource.URI, v.Resource.MIMEType)))
			}
		case *sdk.AudioContent:
			out = append(out, apitype.TextBlock(fmt.Sprintf("[audio content (%s): not passed to the model]", v.MIMEType)))
		}
	}
	if len(out) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			out = append(out, apitype.TextBlock(c.scrub(string(b))))
		}
	}
	return out
}

// conn returns the session's connection to the server (not yet connected), creating it with the session's
// credential and networking. Idle connections of any session are closed on the way.
func (m *MCP) conn(ctx context.Context, sessionID string, server apitype.MCPServer) (*mcpConn, error) {
	u, err := url.Parse(server.URL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, &mcp.Error{Kind: mcp.KindConnection, Server: server.Name, Message: "the server URL is not an http(s) URL"}
	}
	key := connKey{session: sessionID, name: server.Name, url: server.URL}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, &mcp.Error{Kind: mcp.KindConnection, Server: server.Name, Message: "the MCP proxy is closed"}
	}
	now := time.Now()
	var idle []*mcpConn
	for k, c := range m.conns {
		if k != key && now.Sub(c.lastUsed()) > m.cfg.IdleTimeout {
			delete(m.conns, k)
			idle = append(idle, c)
		}
	}
	c := m.conns[key]
	m.mu.Unlock()
	for _, ic := range idle {
		ic.close()
	}
	if c != nil {
		c.touch()
		return c, nil
	}

	sess, err := m.cfg.Store.SessionGet(ctx, sessionID)
	if err != nil {
		return nil, fmt.Errorf("proxy: session %s: %w", sessionID, err)
	}
	if !slices.ContainsFunc(sess.Agent.MCPServers, func(s apitype.MCPServer) bool { return s.Name == server.Name && s.URL == server.URL }) {
		return nil, &mcp.Error{Kind: mcp.KindConnection, Server: server.Name, Message: "the session's agent has no such MCP server"}
	}
	var networking *apitype.Networking
	if sess.EnvironmentID != "" {
		env, err := m.cfg.Store.EnvironmentGet(ctx, sess.EnvironmentID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("proxy: environment %s: %w", sess.EnvironmentID, err)
		}
		if err == nil {
			networking = env.Config.Networking
		}
	}
	cred, err := m.credential(ctx, sess, server.URL)
	if err != nil {
		return nil, err
	}
	policy := mcpPolicy(networking, u)
	policy.AllowInternal = slices.Clone(m.cfg.AllowInternal)
	c = &mcpConn{m: m, session: sessionID, server: server, cred: cred, policy: policy, host: u.Hostname(), port: u.Port()}
	if c.port == "" {
		c.port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	c.touch()
	c.http = newMCPHTTPClient(c, m.transport(policy))
	m.mu.Lock()
	if prev := m.conns[key]; prev != nil {
		m.mu.Unlock()
		return prev, nil
	}
	m.conns[key] = c
	m.mu.Unlock()
	return c, nil
}

// newMCPHTTPClient is the HTTP client of a connection: the credential added by bearerTransport, no redirects (a
// redirect would carry the token to wherever it points).
func newMCPHTTPClient(c *mcpConn, base http.RoundTripper) *http.Client {
	return &http.Client{
		Transport:     &bearerTransport{c: c, base: base},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// mcpPolicy is the egress policy MCP calls of a session obey: its environment's networking, where limited
// networking reaches an MCP server if allow_mcp_servers is set or the server's host is in allowed_hosts.
func mcpPolicy(n *apitype.Networking, u *url.URL) egress.Policy {
	p := egress.PolicyFor(n)
	if n != nil && n.Type == apitype.NetworkingLimited && n.AllowMCPServers != nil && *n.AllowMCPServers {
		p.Hosts = append(slices.Clone(p.Hosts), u.Hostname())
	}
	return p
}

// transport is an HTTP transport whose every connection is checked by policy (with the operator's trusted
// internal destinations) after resolution, and pinned to the addresses checked.
func (m *MCP) transport(policy egress.Policy) *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           dialChecked(policy),
		TLSClientConfig:       &tls.Config{RootCAs: m.rootCAs(), MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   15 * time.Second,
		ResponseHeaderTimeout: 5 * time.Minute,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConns:          4,
		ForceAttemptHTTP2:     true,
	}
}

// dialChecked dials only the addresses policy allows host:port to resolve to, checked after resolution and
// pinned (the connection goes to an address checked, never to a second DNS answer).
func dialChecked(policy egress.Policy) func(ctx context.Context, network, addr string) (net.Conn, error) {
	dialer := &net.Dialer{Timeout: 15 * time.Second}
	return func(ctx context.Context, _, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		ips, err := policy.Resolve(ctx, host, port)
		if err != nil {
			return nil, err
		}
		var last error
		for _, ip := range ips {
			c, err := dialer.DialContext(ctx, "tcp", net.JoinHostPort(ip.String(), port))
			if err == nil {
				return c, nil
			}
			last = err
		}
		return nil, last
	}
}

// rootCAs is the system pool with the operator's extra CAs, or nil (the system pool) without them.
func (m *MCP) rootCAs() *x509.CertPool { return m.cfg.RootCAs }

// mcpConn is one session's connection to one MCP server. mu serialises its use: a session runs one tool at a time.
type mcpConn struct {
	m       *MCP
	session string // the session the connection serves
	server  apitype.MCPServer
	cred    *bearer // nil: the session has no credential for the server
	http    *http.Client
	policy  egress.Policy // the session's networking for MCP, with the operator's trusted internal destinations
	host    string
	port    string

	used       atomic.Int64 // unix nanoseconds of the last use
	authFailed atomic.Bool  // the server answered 401 or 403 (after any refresh) since the flag was reset
	stale      atomic.Bool  // the server said its tools changed
	// record keeps the first failing HTTP answer in failed (validations).
	record bool
	failed atomic.Pointer[apitype.HTTPResponse]

	mu     sync.Mutex
	sess   *sdk.ClientSession
	cancel context.CancelFunc // ends sess's connection
	ended  *atomic.Bool       // set once sess's connection has ended
	tools  []mcp.Tool
}

func (c *mcpConn) touch()              { c.used.Store(time.Now().UnixNano()) }
func (c *mcpConn) lastUsed() time.Time { return time.Unix(0, c.used.Load()) }

// close ends the connection (waiting for a call in flight).
func (c *mcpConn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drop()
}

// drop ends the connection; c.mu is held. The next use connects again.
func (c *mcpConn) drop() {
	if c.sess != nil {
		_ = c.sess.Close()
		c.cancel()
		c.sess, c.cancel = nil, nil
	}
}

// connect connects if not connected: Streamable HTTP first, then the older HTTP+SSE transport. c.mu is held.
// The connection lives beyond ctx (which bounds only the attempt).
func (c *mcpConn) connect(ctx context.Context) error {
	if c.sess != nil && !c.ended.Load() {
		return nil
	}
	c.drop() // a connection the server (or the network) ended: a new one
	if _, err := c.policy.Resolve(ctx, c.host, c.port); err != nil {
		msg := err.Error()
		if errors.Is(err, egress.ErrDenied) {
			msg = "the environment's networking does not allow this server: " + msg
		}
		return &mcp.Error{Kind: mcp.KindConnection, Server: c.server.Name, Message: msg}
	}
	client := sdk.NewClient(&sdk.Implementation{Name: "corral", Version: "1"}, &sdk.ClientOptions{
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) { c.stale.Store(true) },
	})
	c.authFailed.Store(false)
	streamable := &sdk.StreamableClientTransport{Endpoint: c.server.URL, HTTPClient: c.http, MaxRetries: 1}
	sess, cancel, err := c.dial(ctx, client, streamable)
	if err != nil && !c.authFailed.Load() && ctx.Err() == nil {
		var err2 error
		sess, cancel, err2 = c.dial(ctx, client, &sdk.SSEClientTransport{Endpoint: c.server.URL, HTTPClient: c.http})
		if err2 == nil {
			err = nil
		} else {
			err = fmt.Errorf("streamable HTTP: %w; HTTP+SSE: %w", err, err2)
		}
	}
	if err != nil {
		return c.fail(ctx, err)
	}
	ended := &atomic.Bool{}
	c.sess, c.cancel, c.tools, c.ended = sess, cancel, nil, ended
	go func() {
		_ = sess.Wait() // returns once the connection is closed, by either side
		ended.Store(true)
	}()
	return nil
}

// dial runs one connection attempt under its own long-lived context, given up when ctx ends first.
func (c *mcpConn) dial(ctx context.Context, client *sdk.Client, t sdk.Transport) (*sdk.ClientSession, context.CancelFunc, error) {
	life, cancel := context.WithCancel(context.Background())
	type result struct {
		s   *sdk.ClientSession
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := client.Connect(life, t, nil)
		done <- result{s, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			cancel()
			return nil, nil, r.err
		}
		return r.s, cancel, nil
	case <-ctx.Done():
		cancel()
		if r := <-done; r.s != nil {
			_ = r.s.Close()
		}
		return nil, nil, ctx.Err()
	}
}

// fail turns an error of the connection into the mcp.Error the brain reports, with every secret scrubbed, and
// drops the connection so that the next use connects again. c.mu is held.
func (c *mcpConn) fail(ctx context.Context, err error) error {
	c.drop()
	kind, msg := mcp.KindConnection, c.scrub(err.Error())
	switch {
	case c.authFailed.Load() && c.cred == nil:
		kind, msg = mcp.KindAuthentication, "the server refused the request (401/403) and no credential of the session's vaults has its mcp_server_url"
	case c.authFailed.Load():
		kind, msg = mcp.KindAuthentication, "the server refused the session's credential (401/403)"
		if r := c.cred.refreshError(); r != "" {
			msg += "; refreshing it failed: " + r
		}
	case ctx.Err() != nil:
		msg = "the server did not answer in time"
	case errors.Is(err, egress.ErrDenied):
		msg = "the environment's networking does not allow this server: " + msg
	}
	if kind == mcp.KindAuthentication {
		// The session's credentials may change (one added, or replaced): the next use picks them again.
		c.m.forget(c)
	}
	c.m.cfg.Logger.Info("mcp server failed", "session", c.session, "mcp_server", c.server.Name, "kind", kind, "err", msg)
	return &mcp.Error{Kind: kind, Server: c.server.Name, Message: msg}
}

func (c *mcpConn) errorf(kind, format string, args ...any) error {
	c.drop()
	return &mcp.Error{Kind: kind, Server: c.server.Name, Message: fmt.Sprintf(format, args...)}
}

// scrub replaces every secret of the connection's credential in s.
func (c *mcpConn) scrub(s string) string {
	if c.cred == nil {
		return s
	}
	return c.cred.scrub(s)
}

// bearerTransport adds the credential to each request; on a 401 it refreshes an mcp_oauth token once and
// retries the request with the new one.
type bearerTransport struct {
	c    *mcpConn
	base http.RoundTripper
}

func (t *bearerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	cred := t.c.cred
	if cred == nil {
		resp, err := t.base.RoundTrip(req)
		t.observe(resp)
		return resp, err
	}
	tok, err := cred.current(req.Context())
	if err != nil {
		return nil, err
	}
	out := req.Clone(req.Context())
	out.Header.Set("Authorization", "Bearer "+tok)
	resp, err := t.base.RoundTrip(out)
	if err != nil || resp.StatusCode != http.StatusUnauthorized || (req.Body != nil && req.GetBody == nil) {
		t.observe(resp)
		return resp, err
	}
	var fresh string
	var rerr error
	if cred.refreshable() {
		fresh, rerr = cred.refreshAfter(req.Context(), tok)
	} else {
		// A static token may have been replaced through the API since it was read.
		fresh, rerr = cred.reloaded(req.Context(), tok)
	}
	if rerr != nil {
		t.observe(resp)
		return resp, nil
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	retry := req.Clone(req.Context())
	if req.GetBody != nil {
		if retry.Body, err = req.GetBody(); err != nil {
			return nil, err
		}
	}
	retry.Header.Set("Authorization", "Bearer "+fresh)
	resp, err = t.base.RoundTrip(retry)
	t.observe(resp)
	return resp, err
}

// maxMCPResponse bounds an MCP server's JSON answer (an SSE stream's events are bounded one by one by the SDK's
// MaxEventSize, 16 MiB): a hostile server cannot make the proxy hold more.
const maxMCPResponse = 32 << 20

// observe notes a 401 or 403, which makes the failure an authentication error, keeps the first failing answer
// (scrubbed) for a validation, and caps a JSON answer at maxMCPResponse.
func (t *bearerTransport) observe(resp *http.Response) {
	if resp == nil {
		return
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.LimitReader(resp.Body, maxMCPResponse), resp.Body}
	}
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		t.c.authFailed.Store(true)
	}
	if t.c.record && resp.StatusCode >= 400 {
		head, _ := io.ReadAll(io.LimitReader(resp.Body, maxRecordedBody+1))
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
		body, cut := scrubBody(head, maxRecordedBody, t.c.secrets())
		ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
		t.c.failed.CompareAndSwap(nil, &apitype.HTTPResponse{StatusCode: resp.StatusCode, ContentType: ct, Body: body, BodyTruncated: cut})
	}
}

// maxRecordedBody bounds the body of a failing answer a validation reports.
const maxRecordedBody = 4096

// secrets are the credential's secrets, for scrubbing.
func (c *mcpConn) secrets() []string {
	if c.cred == nil {
		return nil
	}
	c.cred.mu.Lock()
	defer c.cred.mu.Unlock()
	return slices.Clone(c.cred.seen)
}

// credential picks the session's credential for an MCP server: the first active static_bearer or mcp_oauth
// credential, in the order of the session's unarchived vaults, whose mcp_server_url matches url. Nil if none.
func (m *MCP) credential(ctx context.Context, sess *apitype.Session, serverURL string) (*bearer, error) {
	want := normMCPURL(serverURL)
	for _, vid := range sess.VaultIDs {
		v, err := m.cfg.Store.VaultGet(ctx, vid)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("proxy: vault %s: %w", vid, err)
		}
		if v.ArchivedAt != nil {
			continue
		}
		list, err := m.cfg.Store.CredentialList(ctx, &store.CredentialListParams{VaultID: vid})
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("proxy: credentials of vault %s: %w", vid, err)
		}
		for i := range list {
			c := &list[i]
			if c.ArchivedAt != nil || (c.Auth.Type != apitype.AuthStaticBearer && c.Auth.Type != apitype.AuthMCPOAuth) ||
				normMCPURL(c.Auth.MCPServerURL) != want {
				continue
			}
			b := &bearer{m: m, vaultID: vid, id: c.ID}
			if err := b.load(ctx); err != nil {
				return nil, err
			}
			return b, nil
		}
	}
	return nil, nil
}

// normMCPURL is the form two MCP server URLs are compared in: scheme and host lowercased, the default port and
// a trailing slash dropped.
func normMCPURL(s string) string {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil {
		return s
	}
	host := strings.ToLower(u.Hostname())
	port := u.Port()
	scheme := strings.ToLower(u.Scheme)
	if (scheme == "https" && port == "443") || (scheme == "http" && port == "80") {
		port = ""
	}
	if port != "" {
		host = net.JoinHostPort(host, port)
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	out := scheme + "://" + host + strings.TrimSuffix(u.EscapedPath(), "/")
	if u.RawQuery != "" {
		out += "?" + u.RawQuery
	}
	return out
}

// bearer is a session's credential for one MCP server: its current token, and for mcp_oauth what refreshing
// it needs. The secrets are read from the vault when loaded and after each refresh.
type bearer struct {
	m           *MCP
	vaultID, id string

	mu       sync.Mutex
	cred     *apitype.Credential
	token    string
	refresh  string // the refresh token, "" if none
	secret   string // the client secret, "" if none
	seen     []string
	loadedAt time.Time
	lastErr  string // the last refresh failure, scrubbed
	// refreshes counts successful refreshes; lastRefresh is the last failure as the token endpoint gave it.
	refreshes   int
	lastRefresh *RefreshError
}

// load reads the credential and its secrets from the store.
func (b *bearer) load(ctx context.Context) error {
	c, err := b.m.cfg.Store.CredentialGet(ctx, &store.CredentialRef{VaultID: b.vaultID, ID: b.id})
	if err != nil {
		return fmt.Errorf("proxy: credential %s: %w", b.id, err)
	}
	sealed, err := b.m.cfg.Store.SecretList(ctx, &store.SecretListParams{CredentialID: b.id})
	if err != nil {
		return fmt.Errorf("proxy: secrets of credential %s: %w", b.id, err)
	}
	vals := map[string]string{}
	for i := range sealed {
		v, err := b.m.cfg.Vault.Open(&sealed[i])
		if err != nil {
			return fmt.Errorf("proxy: credential %s: %w", b.id, err)
		}
		vals[sealed[i].Name] = string(v)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cred, b.loadedAt = c, time.Now()
	b.token = vals[secretBearerToken]
	if c.Auth.Type == apitype.AuthMCPOAuth {
		b.token = vals[secretAccessToken]
	}
	b.refresh, b.secret = vals[secretRefreshToken], vals[secretClientSecret]
	for _, s := range []string{b.token, b.refresh, b.secret} {
		if s != "" && !slices.Contains(b.seen, s) {
			b.seen = append(b.seen, s)
		}
	}
	return nil
}

// refreshable reports whether the credential can be refreshed (mcp_oauth with a refresh block and token).
func (b *bearer) refreshable() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cred.Auth.Type == apitype.AuthMCPOAuth && b.cred.Auth.Refresh != nil && b.refresh != ""
}

// refreshMargin is how long before its expiry a token is refreshed.
const refreshMargin = time.Minute

// current returns the token to send, refreshing an mcp_oauth token that expires within refreshMargin first
// (a failed refresh sends the old token: the server decides).
func (b *bearer) current(ctx context.Context) (string, error) {
	b.mu.Lock()
	stale := time.Since(b.loadedAt) > RefreshEvery
	b.mu.Unlock()
	if stale {
		// A credential updated (a new token), archived or deleted meanwhile: its current state applies.
		if err := b.load(ctx); err != nil {
			return "", err
		}
	}
	b.mu.Lock()
	tok, exp, archived := b.token, b.cred.Auth.ExpiresAt, b.cred.ArchivedAt != nil
	b.mu.Unlock()
	if archived || tok == "" {
		return "", errors.New("the session's credential for this server was archived")
	}
	if exp != nil && time.Until(*exp) < refreshMargin && b.refreshable() {
		if fresh, err := b.refreshAfter(ctx, tok); err == nil {
			return fresh, nil
		}
	}
	return tok, nil
}

func (b *bearer) refreshError() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lastErr
}

// scrub replaces every secret this credential has held in s.
func (b *bearer) scrub(s string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, v := range b.seen {
		if len(v) >= 4 {
			s = strings.ReplaceAll(s, v, "[redacted]")
		}
	}
	return s
}

// refreshAfter refreshes the token unless it is no longer old (another caller refreshed it meanwhile), and
// returns the current one. Refreshes of one credential run one at a time across the proxy's connections, and a
// caller that waited for another's refresh takes its result instead of making a request of its own.
func (b *bearer) refreshAfter(ctx context.Context, old string) (string, error) {
	mu := b.m.refreshLock(b.id)
	mu.Lock()
	defer mu.Unlock()
	// Another connection (or process) may have refreshed the credential: read it again first.
	if err := b.load(ctx); err != nil {
		return "", err
	}
	b.mu.Lock()
	cur, exp := b.token, b.cred.Auth.ExpiresAt
	b.mu.Unlock()
	if cur != old && (exp == nil || time.Until(*exp) > refreshMargin) {
		return cur, nil
	}
	fresh, err := b.m.refreshCredential(ctx, b)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		b.lastErr = scrubAll(err.Error(), b.seen)
		if re, ok := errors.AsType[*RefreshError](err); ok {
			b.lastRefresh = re
		} else {
			b.lastRefresh = &RefreshError{Err: b.lastErr}
		}
		return "", errors.New(b.lastErr)
	}
	b.lastErr, b.lastRefresh = "", nil
	b.refreshes++
	return fresh, nil
}

// reloaded reads the credential again and returns its token if it is no longer old.
func (b *bearer) reloaded(ctx context.Context, old string) (string, error) {
	if err := b.load(ctx); err != nil {
		return "", err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.token == old || b.token == "" || b.cred.ArchivedAt != nil {
		return "", errors.New("the credential has no newer token")
	}
	return b.token, nil
}

// forget removes a connection from the cache (c.mu may be held: m.mu is never held while taking a c.mu).
func (m *MCP) forget(c *mcpConn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, v := range m.conns {
		if v == c {
			delete(m.conns, k)
		}
	}
}

func (m *MCP) refreshLock(credID string) *sync.Mutex {
	m.mu.Lock()
	defer m.mu.Unlock()
	mu := m.flight[credID]
	if mu == nil {
		mu = &sync.Mutex{}
		m.flight[credID] = mu
	}
	return mu
}

func scrubAll(s string, secrets []string) string {
	for _, v := range secrets {
		if len(v) >= 4 {
			s = strings.ReplaceAll(s, v, "[redacted]")
		}
	}
	return s
}

// scrubBody returns at most limit bytes of body with every secret replaced, and whether it was cut. The secrets
// are replaced before the cut, so that one straddling the limit is not left half visible; and a cut body that
// ends with the beginning of a secret (its rest beyond what was read) loses that beginning too.
func scrubBody(body []byte, limit int, secrets []string) (string, bool) {
	s := scrubAll(string(body), secrets)
	if len(s) <= limit && len(body) <= limit {
		return s, false
	}
	s = s[:min(limit, len(s))]
	for _, v := range secrets {
		if len(v) < 4 {
			continue
		}
		for k := min(len(v)-1, len(s)); k > 0; k-- {
			if strings.HasSuffix(s, v[:k]) {
				s = s[:len(s)-k]
				break
			}
		}
	}
	return s, true
}
