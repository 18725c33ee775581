// This file is one session's connection to one MCP server: connecting (Streamable HTTP, then HTTP+SSE),
// and turning its failures into the mcp.Error the brain reports.

package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/mcp"
	"github.com/corralhq/corral/internal/sandbox/egress"
)

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
	// tunneled: the server is reached through a tunnel's connector, its host never resolved (dialer).
	tunneled bool

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
	c.drop()         // a connection the server (or the network) ended: a new one
	if !c.tunneled { // a tunnel's checks run at each of its dials (tunnel.Route.DialTLS)
		if _, err := c.policy.Resolve(ctx, c.host, c.port); err != nil {
			return c.refused(err)
		}
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
		kind, msg = mcp.KindAuthentication, "the server refused the request (401/403) and no credential of the session's vaults matches it: "+
			"add a static_bearer or mcp_oauth credential with mcp_server_url "+c.server.URL+" to one of the session's vaults (vault_ids)"
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

// refused is the connection error of a server the connection may not reach (the environment's networking, or
// its tunnel).
func (c *mcpConn) refused(err error) error {
	msg := err.Error()
	if errors.Is(err, egress.ErrDenied) {
		msg = "the environment's networking does not allow this server: " + msg
	}
	return &mcp.Error{Kind: mcp.KindConnection, Server: c.server.Name, Message: msg}
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

// secrets are the credential's secrets, for scrubbing.
func (c *mcpConn) secrets() []string {
	if c.cred == nil {
		return nil
	}
	c.cred.mu.Lock()
	defer c.cred.mu.Unlock()
	return slices.Clone(c.cred.seen)
}
