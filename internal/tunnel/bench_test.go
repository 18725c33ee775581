package tunnel_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/proxy"
	"github.com/corralhq/corral/internal/tunnel"
)

// mcpServer is a private MCP server (the official SDK's, Streamable HTTP at /mcp) over TLS on 127.0.0.1, whose
// certificate ca issued for host, with one tool: echo {text} answers "echo: <text>". It returns its address.
func mcpServer(tb testing.TB, ca *proxy.CA, host string) string {
	tb.Helper()
	leaf, err := ca.Leaf(host)
	if err != nil {
		tb.Fatal(err)
	}
	s := sdk.NewServer(&sdk.Implementation{Name: "wiki", Version: "1"}, nil)
	type text struct {
		Text string `json:"text" jsonschema:"the text to echo"`
	}
	sdk.AddTool(s, &sdk.Tool{Name: "echo", Description: "Echoes its text."}, func(ctx context.Context, r *sdk.CallToolRequest, in text) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "echo: " + in.Text}}}, nil, nil
	})
	mux := http.NewServeMux()
	// The SDK refuses, on a loopback listener, a Host that is not a loopback name (DNS rebinding protection);
	// requests through a tunnel name wiki.<domain>, so a server listening on loopback beside its connector
	// turns that protection off.
	opts := &sdk.StreamableHTTPOptions{DisableLocalhostProtection: true}
	mux.Handle("/mcp", sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, opts))
	srv := httptest.NewUnstartedServer(mux)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	srv.StartTLS()
	tb.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// BenchmarkMCPCall is the latency one MCP tool call adds when it goes through a tunnel: an official SDK client
// calls echo on a private MCP server, directly (TLS to the server's address, verified against the tunnel's CA)
// or through the hub and a connector (Resolve, then Route.DialTLS, as the MCP proxy does). On a reused
// connection an op is one call on a connected session, whose HTTP connection is kept alive; with
// -new-connection each call dials a connection of its own (through the tunnel: a Resolve, a stream, the
// connector's dial of the server, and TLS over the stream). The server, the hub and the connector run in this
// process: allocs/op counts all of them.
func BenchmarkMCPCall(b *testing.B) {
	r := newRig(b, tunnel.HubConfig{})
	host := "wiki." + r.tunnel.Domain
	addr := mcpServer(b, r.ca, host)
	connector(b, r, r.token, map[string]string{"wiki": addr})
	waitConnected(b, r.hub, r.tunnel.ID, 1)

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(r.ca.CertPEM())
	direct := func(dials *atomic.Int64) *http.Transport {
		return &http.Transport{DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			dials.Add(1)
			d := tls.Dialer{Config: &tls.Config{ServerName: host, RootCAs: roots, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}}
			return d.DialContext(ctx, "tcp", addr)
		}}
	}
	through := func(dials *atomic.Int64) *http.Transport {
		return &http.Transport{DialTLSContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			dials.Add(1)
			h, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			route, ok, err := r.hub.Resolve(ctx, h, apitype.DefaultWorkspaceID)
			if !ok {
				return nil, errors.New("not a tunnel's host")
			}
			if err != nil {
				return nil, err
			}
			return route.DialTLS(ctx, h, port)
		}}
	}

	for _, c := range []struct {
		name  string
		tr    func(*atomic.Int64) *http.Transport
		fresh bool
	}{
		{"direct", direct, false},
		{"tunnel", through, false},
		{"direct-new-connection", direct, true},
		{"tunnel-new-connection", through, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			ctx := b.Context()
			var dials atomic.Int64
			tr := c.tr(&dials)
			// A new connection per call: with keep-alives off each request dials and its connection is closed
			// after it. (Closing the idle connections before each call is racy: the SDK reads a call's answer
			// and returns before the connection is back in the pool, so the next call may still reuse it.)
			tr.DisableKeepAlives = c.fresh
			b.Cleanup(tr.CloseIdleConnections)
			client := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, nil)
			session, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: "https://" + host + "/mcp",
				HTTPClient: &http.Client{Transport: tr}, MaxRetries: 1}, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = session.Close() })
			params := &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hello"}}
			b.ReportAllocs()
			before := dials.Load()
			for b.Loop() {
				res, err := session.CallTool(ctx, params)
				if err != nil {
					b.Fatal(err)
				}
				if len(res.Content) != 1 || res.IsError {
					b.Fatalf("echo answered %+v", res)
				}
				if t, ok := res.Content[0].(*sdk.TextContent); !ok || t.Text != "echo: hello" {
					b.Fatalf("echo answered %+v", res.Content[0])
				}
			}
			// Each call dialed, or nearly all shared the connections kept alive: the SDK drains a call's answer
			// after the call returned, so a call that comes before the drain ends finds no idle connection
			// and dials (1 in 100 to 400 here). The standalone SSE stream keeps a connection of its own.
			n := dials.Load() - before
			if c.fresh && (n < int64(b.N) || n > int64(b.N)+1) || !c.fresh && n > max(2, int64(b.N)/10) {
				b.Fatalf("%d dials for %d calls", n, b.N)
			}
			b.ReportMetric(float64(n)/float64(b.N), "dials/op")
		})
	}
}
