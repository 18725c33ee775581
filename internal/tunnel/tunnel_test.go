package tunnel_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/proxy"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/tunnel"
)

// rig is a hub behind a real HTTP server, over a SQLite store, with one tunnel.
type rig struct {
	st     store.Store
	hub    *tunnel.Hub
	srv    *httptest.Server
	tunnel *store.TunnelRecord
	token  string
	ca     *proxy.CA
}

func newRig(t testing.TB, cfg tunnel.HubConfig) *rig {
	t.Helper()
	st, err := sqlite.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg.Store = st
	hub, err := tunnel.NewHub(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hub.Close() })
	mux := http.NewServeMux()
	mux.Handle(tunnel.ConnectPath, hub)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	r := &rig{st: st, hub: hub, srv: srv}
	r.tunnel, r.token = r.addTunnel(t, "t1")
	ca, err := proxy.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	r.ca = ca
	r.addCert(t, r.tunnel.ID, ca)
	return r
}

// addTunnel stores a tunnel with the domain <label>.<base> and returns it with its token.
func (r *rig) addTunnel(t testing.TB, label string) (*store.TunnelRecord, string) {
	t.Helper()
	token := "ctt_" + apitype.NewID("")
	rec := &store.TunnelRecord{
		Tunnel: apitype.Tunnel{Type: apitype.ObjectTunnel, ID: apitype.NewID(apitype.PrefixTunnel),
			Domain: label + "." + r.hub.Domain(), CreatedAt: apitype.Now()},
		TokenID: apitype.NewID(apitype.PrefixTunnelToken), TokenHash: apitype.HashAPIKey(token),
		Token: store.SealedSecret{Name: "tunnel_token", Ciphertext: []byte("sealed")},
	}
	rec.Token.CredentialID = rec.ID
	if err := r.st.TunnelCreate(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	return rec, token
}

func (r *rig) addCert(t testing.TB, tunnelID string, ca *proxy.CA) {
	t.Helper()
	c := &store.TunnelCertificateRecord{TunnelCertificate: apitype.TunnelCertificate{Type: apitype.ObjectTunnelCertificate,
		ID: apitype.NewID(apitype.PrefixTunnelCert), TunnelID: tunnelID, Fingerprint: "f", CreatedAt: apitype.Now()}, PEM: string(ca.CertPEM())}
	if err := r.st.TunnelCertificateCreate(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}

// upstream is a private HTTPS server whose certificate ca issued for host.
func upstream(t *testing.T, ca *proxy.CA, host string) string {
	t.Helper()
	leaf, err := ca.Leaf(host)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, "private "+r.Host+" "+r.URL.Path+" "+string(body))
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// connector runs a connector until the test ends; its result arrives on the channel.
func connector(t testing.TB, r *rig, token string, routes map[string]string) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done, stopped := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(stopped)
		done <- tunnel.RunConnector(ctx, tunnel.ConnectorConfig{Servers: []string{r.srv.URL}, Token: token, Routes: routes})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-stopped:
		case <-time.After(10 * time.Second):
			t.Error("the connector did not stop")
		}
	})
	return done
}

func waitConnected(t testing.TB, hub *tunnel.Hub, tunnelID string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for hub.Connected(tunnelID) != n {
		if time.Now().After(deadline) {
			t.Fatalf("tunnel %s: %d connectors connected, want %d", tunnelID, hub.Connected(tunnelID), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// get does an HTTPS request to https://host/path through the hub.
func get(ctx context.Context, hub *tunnel.Hub, host, path string) (string, error) {
	tr := &http.Transport{DialTLSContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
		h, port, _ := net.SplitHostPort(addr)
		route, ok, err := hub.Resolve(ctx, h, apitype.DefaultWorkspaceID)
		if !ok {
			return nil, errors.New("not a tunnel's host")
		}
		if err != nil {
			return nil, err
		}
		return route.DialTLS(ctx, h, port)
	}}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+host+path, strings.NewReader("hello"))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestTunnelCarries: a connector connects with the tunnel's token and carries a request for
// https://wiki.<domain>/ to the private server its route names, over TLS from the hub to that server verified
// against the tunnel's CA; a host the connector has no route for, a server whose certificate another CA issued,
// a tunnel without a certificate and a host outside the base domain are each refused with the reason.
func TestTunnelCarries(t *testing.T) {
	r := newRig(t, tunnel.HubConfig{})
	host := "wiki." + r.tunnel.Domain
	other, err := proxy.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	connector(t, r, r.token, map[string]string{"wiki": upstream(t, r.ca, host), "rogue": upstream(t, other, "rogue."+r.tunnel.Domain)})
	waitConnected(t, r.hub, r.tunnel.ID, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	body, err := get(ctx, r.hub, host, "/mcp")
	if err != nil || body != "private "+host+" /mcp hello" {
		t.Fatalf("through the tunnel: %q, %v", body, err)
	}
	for _, c := range []struct{ host, want string }{
		{"nowhere." + r.tunnel.Domain, `no route for "nowhere.`},
		{"rogue." + r.tunnel.Domain, "certificate signed by unknown authority"},
		{r.tunnel.Domain, "names a server below it"},
		{"wiki.nosuch." + r.hub.Domain(), "no tunnel has the domain nosuch."},
	} {
		if _, err := get(ctx, r.hub, c.host, "/"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.host, err, c.want)
		}
	}
	if _, ok, _ := r.hub.Resolve(ctx, "example.com", apitype.DefaultWorkspaceID); ok {
		t.Error("example.com resolved as a tunnel's host")
	}
	bare, _ := r.addTunnel(t, "bare")
	if _, _, err := r.hub.Resolve(ctx, "wiki."+bare.Domain, apitype.DefaultWorkspaceID); err == nil || !strings.Contains(err.Error(), "no CA certificate") {
		t.Errorf("a tunnel without a certificate: %v", err)
	}
	if _, err := get(ctx, r.hub, "wiki."+r.tunnel.Domain, "/"); err != nil {
		t.Errorf("a second request: %v", err)
	}
	// A tunnel carries its workspace's sessions' traffic alone: to another workspace it does not exist.
	if _, _, err := r.hub.Resolve(ctx, "wiki."+r.tunnel.Domain, "wrkspc_other"); err == nil ||
		!strings.Contains(err.Error(), "no tunnel has the domain "+r.tunnel.Domain) {
		t.Errorf("the default workspace's tunnel for another workspace: %v", err)
	}
	if err := r.st.Own(ctx, bare.ID, "wrkspc_b"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.hub.Resolve(ctx, "wiki."+bare.Domain, "wrkspc_b"); err == nil || !strings.Contains(err.Error(), "no CA certificate") {
		t.Errorf("b's tunnel for b: %v, want it found (and refused for its missing certificate)", err)
	}
	if _, _, err := r.hub.Resolve(ctx, "wiki."+bare.Domain, apitype.DefaultWorkspaceID); err == nil ||
		!strings.Contains(err.Error(), "no tunnel has the domain "+bare.Domain) {
		t.Errorf("b's tunnel for the default workspace: %v", err)
	}
}

// TestTunnelTokenRefused: a wrong token is refused at once (the connector stops with ErrTokenRefused, it does
// not retry); a rotated token drops the connector at once through Revoke, and through the hub's check when
// another process rotated it; an archived tunnel likewise; no connector: the reason says so.
func TestTunnelTokenRefused(t *testing.T) {
	r := newRig(t, tunnel.HubConfig{CheckInterval: 50 * time.Millisecond})
	routes := map[string]string{"wiki": upstream(t, r.ca, "wiki."+r.tunnel.Domain)}
	wait := func(done <-chan error, what string) {
		t.Helper()
		select {
		case err := <-done:
			if !errors.Is(err, tunnel.ErrTokenRefused) {
				t.Errorf("%s: the connector ended with %v, want ErrTokenRefused", what, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the connector is still running", what)
		}
	}
	wait(connector(t, r, "ctt_wrong", routes), "a wrong token")

	rotate := func() string {
		token := "ctt_" + apitype.NewID("")
		if _, err := r.st.TunnelUpdate(context.Background(), r.tunnel.ID, func(t *store.TunnelRecord) error {
			t.TokenID, t.TokenHash = apitype.NewID(apitype.PrefixTunnelToken), apitype.HashAPIKey(token)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return token
	}
	// Rotated in this process: Revoke drops it.
	done := connector(t, r, r.token, routes)
	waitConnected(t, r.hub, r.tunnel.ID, 1)
	token := rotate()
	r.hub.Revoke(r.tunnel.ID)
	wait(done, "rotated, revoked")

	// Rotated elsewhere: the check drops it.
	done = connector(t, r, token, routes)
	waitConnected(t, r.hub, r.tunnel.ID, 1)
	token = rotate()
	wait(done, "rotated by another process")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := get(ctx, r.hub, "wiki."+r.tunnel.Domain, "/"); err == nil || !strings.Contains(err.Error(), "no connector of tunnel") {
		t.Errorf("without a connector: %v", err)
	}

	// Archived elsewhere: the check drops it, and the tunnel refuses traffic.
	done = connector(t, r, token, routes)
	waitConnected(t, r.hub, r.tunnel.ID, 1)
	if _, err := r.st.TunnelUpdate(context.Background(), r.tunnel.ID, func(t *store.TunnelRecord) error {
		now := apitype.Now()
		t.ArchivedAt = &now
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	wait(done, "archived")
	if _, _, err := r.hub.Resolve(ctx, "wiki."+r.tunnel.Domain, apitype.DefaultWorkspaceID); err == nil || !strings.Contains(err.Error(), "archived") {
		t.Errorf("an archived tunnel: %v", err)
	}
}

// TestTunnelBounds: a tunnel takes at most MaxConnectors connectors (the next is answered 429 and keeps trying,
// it is not refused); a request that is not an upgrade, or has no or a wrong token, gets the API's error format.
func TestTunnelBounds(t *testing.T) {
	r := newRig(t, tunnel.HubConfig{MaxConnectors: 1})
	routes := map[string]string{"wiki": upstream(t, r.ca, "wiki."+r.tunnel.Domain)}
	first := connector(t, r, r.token, routes)
	waitConnected(t, r.hub, r.tunnel.ID, 1)
	second := connector(t, r, r.token, routes)
	time.Sleep(300 * time.Millisecond)
	if n := r.hub.Connected(r.tunnel.ID); n != 1 {
		t.Errorf("%d connectors connected, want 1", n)
	}
	select {
	case err := <-second:
		t.Errorf("the second connector ended: %v (it should keep trying)", err)
	case err := <-first:
		t.Errorf("the first connector ended: %v", err)
	default:
	}

	for _, c := range []struct {
		header http.Header
		status int
		typ    string
	}{
		{http.Header{}, http.StatusBadRequest, "invalid_request_error"},
		{http.Header{"Upgrade": {tunnel.Upgrade}}, http.StatusUnauthorized, "authentication_error"},
		{http.Header{"Upgrade": {tunnel.Upgrade}, "Authorization": {"Bearer nope"}}, http.StatusUnauthorized, "authentication_error"},
	} {
		req, _ := http.NewRequest(http.MethodGet, r.srv.URL+tunnel.ConnectPath, nil)
		req.Header = c.header
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(string(b), `"type":"`+c.typ+`"`) {
			t.Errorf("%v: %d %s, want %d %s", c.header, resp.StatusCode, b, c.status, c.typ)
		}
	}
}

// TestConnectorPrintsNoEscape: a server's refusal reaches the connector's operator without its control
// characters (a hostile server's terminal escape sequences) and cut to a bounded length.
func TestConnectorPrintsNoEscape(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"type":"error","error":{"type":"authentication_error","message":"\u001b]0;owned\u0007\u001b[2J`+strings.Repeat("x", 5000)+`"}}`)
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := tunnel.RunConnector(ctx, tunnel.ConnectorConfig{Servers: []string{srv.URL}, Token: "ctt_x", Routes: map[string]string{"wiki": "127.0.0.1:1"}})
	if !errors.Is(err, tunnel.ErrTokenRefused) {
		t.Fatalf("%v, want ErrTokenRefused", err)
	}
	if msg := err.Error(); strings.ContainsAny(msg, "\x1b\x07") || len(msg) > 500 || !strings.Contains(msg, "?]0;owned") {
		t.Errorf("the refusal as printed: %q", msg)
	}
}
