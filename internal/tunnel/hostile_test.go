package tunnel_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/tunnel"
)

// hostileConn connects to the rig's hub with token as a connector would, by hand, and returns the upgraded
// connection: what the test then sends is up to it.
func hostileConn(t *testing.T, r *rig, token string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", r.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	req, _ := http.NewRequest(http.MethodGet, r.srv.URL+tunnel.ConnectPath, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", tunnel.Upgrade)
	req.Header.Set("Authorization", "Bearer "+token)
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || br.Buffered() > 0 {
		t.Fatalf("the hub answered %s (%d bytes after it)", resp.Status, br.Buffered())
	}
	return conn
}

// hostileSession is a hostile connector's yamux session over hostileConn.
func hostileSession(t *testing.T, r *rig) *yamux.Session {
	t.Helper()
	cfg := yamux.DefaultConfig()
	cfg.LogOutput = io.Discard
	sess, err := yamux.Server(hostileConn(t, r, r.token), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	return sess
}

// TestTunnelHostileConnectorStalls: a connector that never answers a stream's open line, or answers it and then
// never speaks TLS, does not hold Route.DialTLS past the hub's DialTimeout, even with a context that never ends
// (http.Transport dials with the request's context detached from its cancellation and deadline), and the
// stream's slot is given back: the stalled dials do not use up the connection's streams.
func TestTunnelHostileConnectorStalls(t *testing.T) {
	for _, answer := range []bool{false, true} {
		r := newRig(t, tunnel.HubConfig{DialTimeout: 300 * time.Millisecond, MaxStreams: 2})
		sess := hostileSession(t, r)
		go func() {
			for {
				s, err := sess.AcceptStream()
				if err != nil {
					return
				}
				if answer {
					br := bufio.NewReader(s)
					_, _ = br.ReadString('\n')
					_, _ = io.WriteString(s, "{}\n") // accepted; then silence where TLS should be
				}
			}
		}()
		waitConnected(t, r.hub, r.tunnel.ID, 1)
		host := "wiki." + r.tunnel.Domain
		route, _, err := r.hub.Resolve(context.Background(), host, apitype.DefaultWorkspaceID)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 4 { // twice the streams a connection takes
			done := make(chan error, 1)
			go func() {
				c, err := route.DialTLS(context.Background(), host, "443")
				if c != nil {
					c.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "tunnel") {
					t.Errorf("answer %v, dial %d: %v, want the tunnel's error", answer, i, err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("answer %v, dial %d: DialTLS still blocked after 5 s (DialTimeout 300ms)", answer, i)
			}
		}
	}
}

// TestTunnelConnectorOpensStream: only Corral opens streams; a connector that opens one is dropped. Each stream
// it opened used to be accepted and half closed, and stayed for yamux's StreamCloseTimeout (a minute) holding up
// to its receive window (256 KiB) of whatever the connector sent on it: memory bounded only by the connector's
// bandwidth.
func TestTunnelConnectorOpensStream(t *testing.T) {
	r := newRig(t, tunnel.HubConfig{})
	sess := hostileSession(t, r)
	waitConnected(t, r.hub, r.tunnel.ID, 1)
	// The hub may drop the connection before OpenStream has seen its own frame sent: then OpenStream fails with
	// yamux's session shutdown, which is the outcome this test wants.
	if s, err := sess.OpenStream(); err == nil {
		_, _ = s.Write(make([]byte, 64<<10))
	} else if !errors.Is(err, yamux.ErrSessionShutdown) {
		t.Fatal(err)
	}
	select {
	case <-sess.CloseChan():
	case <-time.After(5 * time.Second):
		t.Fatal("the hub kept the connection of a connector that opened a stream")
	}
	waitConnected(t, r.hub, r.tunnel.ID, 0)
}

// TestTunnelConnectorPingFlood: yamux answers each ping in a goroutine of its own, which waits up to
// ConnectionWriteTimeout (15 s) for room to send the answer; a connector that sends pings and reads nothing
// made the server hold a goroutine per 12-byte ping. The hub bounds the pings a connector has unanswered, and
// drops a connector past the bound.
func TestTunnelConnectorPingFlood(t *testing.T) {
	r := newRig(t, tunnel.HubConfig{})
	conn := hostileConn(t, r, r.token)
	waitConnected(t, r.hub, r.tunnel.ID, 1)
	before := runtime.NumGoroutine()
	const pings = 20000
	frames := make([]byte, 0, 12*pings)
	for i := range pings {
		// version 0, type ping (2), flags SYN (1), stream 0, the ping's id
		frames = append(frames, 0, 2, 0, 1, 0, 0, 0, 0, byte(i>>24), byte(i>>16), byte(i>>8), byte(i))
	}
	go func() { _, _ = conn.Write(frames) }() // and read nothing
	deadline := time.Now().Add(2 * time.Second)
	peak := 0
	for time.Now().Before(deadline) {
		peak = max(peak, runtime.NumGoroutine()-before)
		time.Sleep(20 * time.Millisecond)
	}
	if peak > 1000 {
		t.Errorf("%d pings unread: the server grew by %d goroutines", pings, peak)
	}
	waitConnected(t, r.hub, r.tunnel.ID, 0)
}

// TestTunnelLingeringStreams: a peer that never closes the streams the other side closed keeps them in yamux
// for StreamCloseTimeout (a minute), each holding up to its receive window (256 KiB) of what the peer sends on
// it. A connector that answers each dial and never closes its streams is dropped once it keeps twice MaxStreams
// of them; a server that opens streams past the connector's MaxStreams and never closes them likewise.
func TestTunnelLingeringStreams(t *testing.T) {
	t.Run("connector", func(t *testing.T) {
		r := newRig(t, tunnel.HubConfig{MaxStreams: 2})
		sess := hostileSession(t, r)
		go func() {
			for {
				s, err := sess.AcceptStream()
				if err != nil {
					return
				}
				_, _ = bufio.NewReader(s).ReadString('\n')
				_, _ = io.WriteString(s, `{"error":"no"}`+"\n")
				_, _ = s.Write(make([]byte, 200<<10)) // and never closed
			}
		}()
		waitConnected(t, r.hub, r.tunnel.ID, 1)
		host := "wiki." + r.tunnel.Domain
		route, _, err := r.hub.Resolve(context.Background(), host, apitype.DefaultWorkspaceID)
		if err != nil {
			t.Fatal(err)
		}
		for range 10 {
			if c, err := route.DialTLS(context.Background(), host, "443"); err == nil {
				c.Close()
				t.Fatal("a dial the connector refused succeeded")
			}
		}
		select {
		case <-sess.CloseChan():
		case <-time.After(5 * time.Second):
			t.Fatalf("the hub kept a connector holding %d streams (MaxStreams 2)", sess.NumStreams())
		}
		waitConnected(t, r.hub, r.tunnel.ID, 0)
	})
	t.Run("server", func(t *testing.T) {
		opened := make(chan *yamux.Session, 1)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + tunnel.Upgrade +
				"\r\n" + tunnel.HeaderTunnelDomain + ": t.example\r\n\r\n")
			_ = brw.Flush()
			cfg := yamux.DefaultConfig()
			cfg.LogOutput = io.Discard
			sess, err := yamux.Client(conn, cfg)
			if err != nil {
				return
			}
			for range 40 { // the connector takes 4 at once; these are never closed
				s, err := sess.OpenStream()
				if err != nil {
					break
				}
				_, _ = s.Write(make([]byte, 200<<10))
			}
			opened <- sess
			<-sess.CloseChan()
		}))
		defer srv.Close()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			_ = tunnel.RunConnector(ctx, tunnel.ConnectorConfig{Servers: []string{srv.URL}, Token: "ctt_x",
				Routes: map[string]string{"wiki": "127.0.0.1:1"}, MaxStreams: 4})
		}()
		var sess *yamux.Session
		select {
		case sess = <-opened:
		case <-time.After(10 * time.Second):
			t.Fatal("the connector did not connect")
		}
		select {
		case <-sess.CloseChan():
		case <-time.After(5 * time.Second):
			t.Fatalf("the connector kept a server holding %d streams (MaxStreams 4)", sess.NumStreams())
		}
	})
}

// TestTunnelConnectorFlappingServer: a server that upgrades the connection and ends it at once (hostile, or a
// load balancer that cuts upgraded connections) is connected to again at once only after a connection that
// lasted; otherwise after the growing pause, not in a loop as fast as the network goes.
func TestTunnelConnectorFlappingServer(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		n.Add(1)
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + tunnel.Upgrade + "\r\n\r\n")
		_ = brw.Flush()
		conn.Close()
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = tunnel.RunConnector(ctx, tunnel.ConnectorConfig{Servers: []string{srv.URL}, Token: "ctt_x",
		Routes: map[string]string{"wiki": "127.0.0.1:1"}})
	if got := n.Load(); got > 4 {
		t.Errorf("%d connections in 2 s to a server that ends each at once, want a pause between them", got)
	}
}
