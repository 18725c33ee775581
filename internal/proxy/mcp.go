// This file is the MCP proxy (MCP): the brain's mcp.Client, and the cache of the sessions' connections; the package
// doc is in doc.go.

package proxy

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/mcp"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/tunnel"
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
	// WebhookEventAppend records vault_credential.refresh_failed when a refresh fails.
	WebhookEventAppend(ctx context.Context, events []apitype.WebhookEvent) error
	// OwnerOf gives a session's workspace: a tunnel carries its workspace's sessions' MCP traffic alone.
	OwnerOf(ctx context.Context, id string) (string, error)
}

// MCPConfig configures MCP.
type MCPConfig struct {
	Store MCPStore     // required
	Vault *vault.Vault // required: opens the tokens and seals the refreshed ones
	// AllowInternal are the host:port pairs the operator trusts although internal (--egress-allow-internal):
	// a private MCP server, or token endpoint, must be one of them.
	AllowInternal []string
	RootCAs       *x509.CertPool // extra CAs to trust besides the system's (--egress-ca-file); nil: system only
	// Tunnels carries the MCP URLs whose host is under the tunnels' base domain through the tunnel's connector
	// (nil: such a URL is dialed like any other).
	Tunnels *tunnel.Hub
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
	c = &mcpConn{m: m, session: sessionID, server: server, cred: cred, policy: policy}
	if err := c.dialer(ctx, u); err != nil {
		return nil, err
	}
	c.touch()
	m.mu.Lock()
	if prev := m.conns[key]; prev != nil {
		m.mu.Unlock()
		return prev, nil
	}
	m.conns[key] = c
	m.mu.Unlock()
	return c, nil
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
