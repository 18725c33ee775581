package tunnel

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hashicorp/yamux"

	"github.com/corralhq/corral/internal/apitype"
)

// ConnectorConfig configures a Connector.
type ConnectorConfig struct {
	// Servers are the base URLs of the Corral processes to connect to (http:// or https://): the process that
	// runs the MCP proxy (`corral serve`, or `corral proxy` in a fleet); one connection is kept to each.
	Servers []string
	// Token is the tunnel's token (reveal_token).
	Token string
	// Routes maps a route key, the labels in front of the tunnel's domain in an MCP URL's host ("wiki" for
	// https://wiki.<domain>/mcp), to the host:port of the private MCP server it names. Nothing else is dialed.
	Routes map[string]string
	// RootCAs verifies the servers' TLS (nil: the system's).
	RootCAs *x509.CertPool
	// MaxStreams bounds the streams carried at once per server (default 64).
	MaxStreams int
	// DialTimeout bounds the dial of a route (default 10 s).
	DialTimeout time.Duration
	// OnConnect, if set, is called each time a connection to a server is up.
	OnConnect func(server, tunnelID, domain string)
	Logger    *slog.Logger
}

// ErrTokenRefused is returned when a server refuses the token: it was rotated, or the tunnel archived.
var ErrTokenRefused = errors.New("tunnel: the server refused the tunnel token (rotated, or the tunnel archived)")

// RunConnector connects to every server and carries their streams until ctx ends or a server refuses the token
// (ErrTokenRefused). A connection that ends otherwise is made again, after a pause that grows to 30 s.
func RunConnector(ctx context.Context, cfg ConnectorConfig) error {
	if len(cfg.Servers) == 0 || cfg.Token == "" || len(cfg.Routes) == 0 {
		return errors.New("tunnel: a connector needs a server, the tunnel token and at least one route")
	}
	for key, addr := range cfg.Routes {
		if _, _, err := net.SplitHostPort(addr); err != nil || key == "" || strings.Trim(key, ".") != key {
			return fmt.Errorf("tunnel: route %q=%q: a route is NAME=HOST:PORT", key, addr)
		}
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = 64
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for _, s := range cfg.Servers {
		wg.Go(func() {
			if err := connectLoop(ctx, &cfg, strings.TrimSuffix(s, "/")); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

// maxPause is the longest pause between connections to a server.
const maxPause = 30 * time.Second

// connectLoop keeps one connection to server; it returns ErrTokenRefused, or nil once ctx ends.
func connectLoop(ctx context.Context, cfg *ConnectorConfig, server string) error {
	pause := time.Second
	for ctx.Err() == nil {
		start := time.Now()
		up, err := connectOnce(ctx, cfg, server)
		if errors.Is(err, ErrTokenRefused) {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		if up && time.Since(start) >= maxPause {
			// A connection that was up a while ended: connect again at once (a server that dropped it because
			// the token was rotated then says so), and only then pause. One that ends as soon as it is up
			// (a hostile server, a load balancer that cuts upgrades) is made again after the pause.
			pause = 0
		}
		cfg.Logger.Warn("tunnel connection ended; connecting again", "server", server, "err", err, "in", pause)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
		pause = max(time.Second, min(2*pause, maxPause))
	}
	return nil
}

// connectOnce makes one connection and carries its streams until it ends; up reports whether it was made.
func connectOnce(ctx context.Context, cfg *ConnectorConfig, server string) (up bool, err error) {
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSClientConfig:     &tls.Config{RootCAs: cfg.RootCAs, MinVersion: tls.VersionTLS12},
		TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{}, // HTTP/1.1: the upgrade needs it
		TLSHandshakeTimeout: 15 * time.Second,
	}
	defer tr.CloseIdleConnections()
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(dctx, http.MethodGet, server+ConnectPath, nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", Upgrade)
	req.Header.Set("Authorization", "Bearer "+cfg.Token)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return false, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		var env apitype.ErrorEnvelope
		_ = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&env)
		if resp.StatusCode == http.StatusUnauthorized {
			return false, fmt.Errorf("%w: %s", ErrTokenRefused, printable(env.Error.Message))
		}
		return false, fmt.Errorf("tunnel: %s answered %s: %s", server, resp.Status, printable(env.Error.Message))
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		resp.Body.Close()
		return false, errors.New("tunnel: the upgraded connection is not writable")
	}
	cancel() // the dial's deadline: the connection outlives it
	domain, tunnelID := resp.Header.Get(HeaderTunnelDomain), resp.Header.Get(HeaderTunnelID)
	sess, err := yamux.Server(&pingGuard{ReadWriteCloser: rwc}, muxConfig(cfg.MaxStreams))
	if err != nil {
		rwc.Close()
		return false, err
	}
	defer sess.Close()
	stop := context.AfterFunc(ctx, func() { _ = sess.Close() })
	defer stop()
	cfg.Logger.Info("tunnel connected", "server", server, "tunnel", tunnelID, "domain", domain,
		"routes", slices.Sorted(maps.Keys(cfg.Routes)))
	if cfg.OnConnect != nil {
		cfg.OnConnect(server, tunnelID, domain)
	}
	slots := make(chan struct{}, cfg.MaxStreams)
	for {
		s, err := sess.AcceptStream()
		if err != nil {
			return true, err
		}
		if n := sess.NumStreams(); n > 2*cfg.MaxStreams {
			// The streams this side closed stay until the server closes them too, holding what it sends.
			return true, fmt.Errorf("tunnel: %s keeps %d streams open, the connector carries %d at once", server, n, cfg.MaxStreams)
		}
		select {
		case slots <- struct{}{}:
		default:
			_ = writeLine(s, acceptLine{Error: "the connector carries the most streams it may at once"})
			_ = s.Close()
			continue
		}
		go func() {
			defer func() { <-slots }()
			carry(ctx, cfg, domain, s)
		}()
	}
}

// carry reads a stream's open line, dials its route and carries bytes both ways until either side ends.
func carry(ctx context.Context, cfg *ConnectorConfig, domain string, s *yamux.Stream) {
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(cfg.DialTimeout))
	var open openLine
	if err := readLine(s, &open); err != nil {
		return
	}
	key := routeKey(open.Host, domain)
	addr, ok := cfg.Routes[key]
	if !ok {
		_ = writeLine(s, acceptLine{Error: fmt.Sprintf("the connector has no route for %q (it routes %s)", open.Host,
			strings.Join(slices.Sorted(maps.Keys(cfg.Routes)), ", "))})
		return
	}
	d := net.Dialer{Timeout: cfg.DialTimeout}
	up, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		cfg.Logger.Warn("tunnel route unreachable", "route", key, "addr", addr, "err", err)
		_ = writeLine(s, acceptLine{Error: fmt.Sprintf("the server of route %q did not accept the connection", key)})
		return
	}
	defer up.Close()
	if err := writeLine(s, acceptLine{}); err != nil {
		return
	}
	_ = s.SetDeadline(time.Time{})
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(up, s)
		if tc, ok := up.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(s, up)
		_ = s.Close()
		done <- struct{}{}
	}()
	<-done
	<-done
}

// printable is a server's message as the connector may print it: at most 300 characters, with no control
// character (a hostile server's escape sequences never reach the operator's terminal).
func printable(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i >= 300 {
			b.WriteString("...")
			break
		}
		if unicode.IsControl(r) || r == utf8.RuneError {
			r = '?'
		}
		b.WriteRune(r)
	}
	return b.String()
}
