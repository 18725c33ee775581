// This file is the HTTP side of an MCP connection: the egress-checked transport and the bearerTransport that adds
// the credential (refreshing it on a 401) and observes the answers.

package proxy

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox/egress"
)

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
	tr := policy.Transport(m.rootCAs(), 15*time.Second)
	tr.ResponseHeaderTimeout, tr.IdleConnTimeout, tr.MaxIdleConns = 5*time.Minute, 90*time.Second, 4
	return tr
}

// dialer sets the connection's host, port and HTTP client for u: through the tunnel whose domain u's host is
// under (an https URL, its host allowed by name by the connection's policy: it is never resolved), or directly
// under the policy.
func (c *mcpConn) dialer(ctx context.Context, u *url.URL) error {
	c.host, c.port = u.Hostname(), urlPort(u)
	hub := c.m.cfg.Tunnels
	if hub == nil {
		c.http = newMCPHTTPClient(c, c.m.transport(c.policy))
		return nil
	}
	ws, err := c.m.cfg.Store.OwnerOf(ctx, c.session)
	if err != nil {
		return err
	}
	_, ok, err := hub.Resolve(ctx, c.host, ws)
	if !ok {
		c.http = newMCPHTTPClient(c, c.m.transport(c.policy))
		return nil
	}
	if err == nil && u.Scheme != "https" {
		err = errTunnelHTTPS
	}
	if err == nil {
		err = c.policy.AllowsName(c.host, c.port)
	}
	if err != nil {
		return c.refused(err)
	}
	c.tunneled = true
	tunnelHost := c.host
	tr := &http.Transport{
		// The URL's host over TLS and nothing else: a server may name another URL (an HTTP+SSE endpoint event
		// does), which a connection through a tunnel does not reach, neither through it nor directly.
		DialContext: func(context.Context, string, string) (net.Conn, error) { return nil, errTunnelHTTPS },
		// Each connection resolves the tunnel again: a certificate added or archived, a token rotated, apply
		// to the next connection.
		DialTLSContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			if !strings.EqualFold(host, tunnelHost) {
				return nil, fmt.Errorf("the server named %s: a connection through a tunnel reaches %s only", host, tunnelHost)
			}
			r, ok, err := hub.Resolve(ctx, host, ws)
			if err == nil && !ok {
				err = fmt.Errorf("%s is no longer below the tunnels' domain", host)
			}
			if err != nil {
				return nil, err
			}
			return r.DialTLS(ctx, host, port)
		},
		ResponseHeaderTimeout: 5 * time.Minute, IdleConnTimeout: 90 * time.Second, MaxIdleConns: 4,
	}
	c.http = newMCPHTTPClient(c, tr)
	return nil
}

var errTunnelHTTPS = errors.New("an MCP server behind a tunnel is reached over https only")

// rootCAs is the system pool with the operator's extra CAs, or nil (the system pool) without them.
func (m *MCP) rootCAs() *x509.CertPool { return m.cfg.RootCAs }

// onServer reports whether u is on the MCP server's URL's origin (scheme, host and port), the only one its
// credential is sent to: an HTTP+SSE server's endpoint event may name any URL, and the SDK posts there.
func (c *mcpConn) onServer(u *url.URL) bool {
	s, err := url.Parse(c.server.URL)
	if err != nil || s.Scheme != u.Scheme || !strings.EqualFold(u.Hostname(), c.host) {
		return false
	}
	return urlPort(u) == c.port
}

// urlPort is u's port, or its scheme's (80 for http, 443 for https).
func urlPort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	return map[string]string{"http": "80", "https": "443"}[u.Scheme]
}

// bearerTransport adds the credential to each request; on a 401 it refreshes an mcp_oauth token once and
// retries the request with the new one.
type bearerTransport struct {
	c    *mcpConn
	base http.RoundTripper
}

func (t *bearerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	cred := t.c.cred
	if cred == nil || !t.c.onServer(req.URL) {
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
