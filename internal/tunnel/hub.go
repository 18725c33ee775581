package tunnel

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// Store is what the hub reads: tunnels by token and domain, their certificates, and their workspaces.
type Store interface {
	OwnerOf(ctx context.Context, id string) (string, error)
	TunnelGet(ctx context.Context, id string) (*store.TunnelRecord, error)
	TunnelByDomain(ctx context.Context, domain string) (*store.TunnelRecord, error)
	TunnelByTokenHash(ctx context.Context, hash string) (*store.TunnelRecord, error)
	TunnelCertificateList(ctx context.Context, tunnelID string, p *store.ListParams) ([]store.TunnelCertificateRecord, error)
}

// HubConfig configures a Hub.
type HubConfig struct {
	Store Store // required
	// Domain is the base domain tunnels' domains are under (apitype.DefaultTunnelDomain when empty).
	Domain string
	// MaxConnectors bounds the connectors of one tunnel connected to this process at once (default 8), and
	// MaxConnections all of them (default 1,024).
	MaxConnectors, MaxConnections int
	// MaxStreams bounds the streams open at once on one connector's connection (default 64).
	MaxStreams int
	// DialTimeout bounds Route.DialTLS, from the wait for a stream to the end of the TLS handshake (default
	// 30 s), whatever its context: http.Transport dials with a context that never ends.
	DialTimeout time.Duration
	// CheckInterval is how often the connected tunnels are read again, to drop the connectors of a tunnel
	// archived, or a token rotated, by another process (default 5 s).
	CheckInterval time.Duration
	Logger        *slog.Logger
}

// Hub is Corral's side of the tunnels: the connectors connected to this process.
type Hub struct {
	cfg  HubConfig
	stop chan struct{}
	done chan struct{}

	mu     sync.Mutex
	links  map[string][]*link // by tunnel id
	count  int
	closed bool
}

// link is one connector's connection.
type link struct {
	tunnelID, tokenID string
	sess              *yamux.Session
	streams           chan struct{} // a slot per open stream
}

// usable reports whether l can carry a dial: published (its upgrade done) and its session open. Call with h.mu held.
func (l *link) usable() bool { return l.sess != nil && !l.sess.IsClosed() }

// NewHub returns a hub and starts its check of the connected tunnels; Close stops it.
func NewHub(cfg HubConfig) (*Hub, error) {
	if cfg.Store == nil {
		return nil, errors.New("tunnel: the hub needs a Store")
	}
	cfg.Domain = strings.ToLower(strings.Trim(cfg.Domain, "."))
	if cfg.Domain == "" {
		cfg.Domain = apitype.DefaultTunnelDomain
	}
	if cfg.MaxConnectors <= 0 {
		cfg.MaxConnectors = 8
	}
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = 1024
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = 64
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 30 * time.Second
	}
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Hub{cfg: cfg, stop: make(chan struct{}), done: make(chan struct{}), links: map[string][]*link{}}
	go h.checkLoop()
	return h, nil
}

// Domain is the base domain of the tunnels.
func (h *Hub) Domain() string { return h.cfg.Domain }

// Close drops every connector and stops the check.
func (h *Hub) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	all := h.links
	h.links = map[string][]*link{}
	h.mu.Unlock()
	close(h.stop)
	<-h.done
	for _, ls := range all {
		h.closeLinks(ls)
	}
	return nil
}

// Revoke drops the connectors of a tunnel whose token was rotated or which was archived (api.TunnelRevoker).
// A connector of the tunnel that connects again is authenticated again.
func (h *Hub) Revoke(tunnelID string) {
	h.mu.Lock()
	ls := h.links[tunnelID]
	delete(h.links, tunnelID)
	h.count -= len(ls)
	h.mu.Unlock()
	h.closeLinks(ls)
	if len(ls) > 0 {
		h.cfg.Logger.Info("tunnel connectors dropped", "tunnel", tunnelID, "connectors", len(ls))
	}
}

// Connected is how many connectors of the tunnel are connected to this process and can carry a dial: a connector
// whose upgrade is still under way holds its place (add) but is not counted until it is published.
func (h *Hub) Connected(tunnelID string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, l := range h.links[tunnelID] {
		if l.usable() {
			n++
		}
	}
	return n
}

// ServeHTTP authenticates a connector by its tunnel token and keeps its connection until it ends, the hub
// closes, or the tunnel's token is rotated or the tunnel archived.
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || !strings.EqualFold(r.Header.Get("Upgrade"), Upgrade) {
		writeError(w, http.StatusBadRequest, apitype.ErrInvalidRequest, "a tunnel connector connects with GET and Upgrade: "+Upgrade)
		return
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		writeError(w, http.StatusUnauthorized, apitype.ErrAuthentication, "a tunnel connector authenticates with its tunnel token (Authorization: Bearer)")
		return
	}
	t, err := h.cfg.Store.TunnelByTokenHash(r.Context(), apitype.HashAPIKey(token))
	switch {
	case errors.Is(err, store.ErrNotFound) || (err == nil && t.ArchivedAt != nil):
		writeError(w, http.StatusUnauthorized, apitype.ErrAuthentication, "the tunnel token is not valid: it was rotated, or its tunnel archived")
		return
	case err != nil:
		h.cfg.Logger.Error("tunnel connect", "err", err)
		writeError(w, http.StatusInternalServerError, apitype.ErrAPI, "the tunnel could not be read")
		return
	}
	l := &link{tunnelID: t.ID, tokenID: t.TokenID, streams: make(chan struct{}, h.cfg.MaxStreams)}
	if err := h.add(l); err != nil {
		writeError(w, http.StatusTooManyRequests, apitype.ErrRateLimit, err.Error())
		return
	}
	rc := http.NewResponseController(w)
	conn, brw, err := rc.Hijack()
	if err != nil {
		h.remove(l)
		writeError(w, http.StatusInternalServerError, apitype.ErrAPI, "the connection cannot be upgraded (HTTP/1.1 only)")
		return
	}
	_ = conn.SetDeadline(time.Time{}) // the server's read and write timeouts are the API's, not a tunnel's
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n%s: %s\r\n%s: %s\r\n\r\n",
		Upgrade, HeaderTunnelID, t.ID, HeaderTunnelDomain, t.Domain)
	if err := brw.Flush(); err != nil || brw.Reader.Buffered() > 0 {
		// A connector sends nothing before the answer: bytes already buffered are a protocol error.
		_ = conn.Close()
		h.remove(l)
		return
	}
	// Corral opens the streams: a connector that opens one is dropped (a backlog of one: yamux resets the others
	// at once). A stream accepted and closed would stay until the connector closed it too, or for a minute,
	// holding what the connector sent on it.
	sess, err := yamux.Client(&pingGuard{ReadWriteCloser: conn}, muxConfig(1))
	if err != nil {
		_ = conn.Close()
		h.remove(l)
		return
	}
	go func() {
		if _, err := sess.Accept(); err == nil {
			h.cfg.Logger.Warn("tunnel connector dropped: it opened a stream", "tunnel", t.ID, "remote", r.RemoteAddr)
			_ = sess.Close()
		}
	}()
	if !h.publish(l, sess) {
		_ = sess.Close()
	}
	h.cfg.Logger.Info("tunnel connector connected", "tunnel", t.ID, "remote", r.RemoteAddr)
	<-sess.CloseChan()
	h.remove(l)
	h.cfg.Logger.Info("tunnel connector disconnected", "tunnel", t.ID)
}

// add reserves a place for l, not yet usable (publish makes it so).
func (h *Hub) add(l *link) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closed:
		return errors.New("the server is shutting down")
	case h.count >= h.cfg.MaxConnections:
		return fmt.Errorf("this server has %d tunnel connectors connected, the most it takes", h.count)
	case len(h.links[l.tunnelID]) >= h.cfg.MaxConnectors:
		return fmt.Errorf("the tunnel has %d connectors connected to this server, the most it takes", len(h.links[l.tunnelID]))
	}
	h.links[l.tunnelID] = append(h.links[l.tunnelID], l)
	h.count++
	return nil
}

// publish makes l usable over sess; false if it was removed meanwhile (revoked, or the hub closed).
func (h *Hub) publish(l *link, sess *yamux.Session) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !slices.Contains(h.links[l.tunnelID], l) {
		return false
	}
	l.sess = sess
	return true
}

// closeLinks closes the links' sessions (those published: one not yet published is closed by ServeHTTP).
func (h *Hub) closeLinks(ls []*link) {
	h.mu.Lock()
	sessions := make([]*yamux.Session, 0, len(ls))
	for _, l := range ls {
		if l.sess != nil {
			sessions = append(sessions, l.sess)
		}
	}
	h.mu.Unlock()
	for _, s := range sessions {
		_ = s.Close()
	}
}

func (h *Hub) remove(l *link) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ls := h.links[l.tunnelID]
	if i := slices.Index(ls, l); i >= 0 {
		h.links[l.tunnelID] = slices.Delete(ls, i, i+1)
		h.count--
		if len(h.links[l.tunnelID]) == 0 {
			delete(h.links, l.tunnelID)
		}
	}
}

// checkLoop reads the connected tunnels again every CheckInterval and drops the connectors whose token is no
// longer the tunnel's, or whose tunnel is archived or gone.
func (h *Hub) checkLoop() {
	defer close(h.done)
	t := time.NewTicker(h.cfg.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		h.mu.Lock()
		ids := make([]string, 0, len(h.links))
		for id := range h.links {
			ids = append(ids, id)
		}
		h.mu.Unlock()
		for _, id := range ids {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			t, err := h.cfg.Store.TunnelGet(ctx, id)
			cancel()
			switch {
			case errors.Is(err, store.ErrNotFound) || (err == nil && t.ArchivedAt != nil):
				h.Revoke(id)
			case err == nil:
				h.dropStale(id, t.TokenID)
			}
		}
	}
}

// dropStale drops the tunnel's connectors authenticated with another token than tokenID.
func (h *Hub) dropStale(tunnelID, tokenID string) {
	h.mu.Lock()
	var stale []*link
	ls := h.links[tunnelID]
	for _, l := range ls {
		if l.tokenID != tokenID {
			stale = append(stale, l)
		}
	}
	h.mu.Unlock()
	for _, l := range stale {
		h.remove(l)
	}
	h.closeLinks(stale)
}

// Route is an MCP URL's host resolved to its tunnel.
type Route struct {
	hub      *Hub
	TunnelID string
	Domain   string
	tokenID  string
	roots    *x509.CertPool
}

// ErrRefused wraps the reasons a tunnel does not carry a request; the message says why.
var ErrRefused = errors.New("tunnel")

// Resolve reports whether host is under the hub's base domain (ok) and, if it is, its tunnel for a session of
// workspace ws: an error wrapping ErrRefused when no tunnel of ws has that domain (another workspace's tunnel
// is refused as if there were none), the tunnel is archived, has no active CA certificate, or the host names no
// server below the tunnel's domain.
func (h *Hub) Resolve(ctx context.Context, host, ws string) (r *Route, ok bool, err error) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	rest, under := strings.CutSuffix(host, "."+h.cfg.Domain)
	if !under {
		return nil, false, nil
	}
	label := rest[strings.LastIndexByte(rest, '.')+1:]
	domain := label + "." + h.cfg.Domain
	if label == rest {
		return nil, true, fmt.Errorf("%w: %s is a tunnel's domain: an MCP URL through a tunnel names a server below it, as <server>.%s", ErrRefused, host, host)
	}
	t, err := h.cfg.Store.TunnelByDomain(ctx, domain)
	if err == nil {
		var owner string
		if owner, err = h.cfg.Store.OwnerOf(ctx, t.ID); err == nil && owner != ws {
			err = store.ErrNotFound
		}
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, true, fmt.Errorf("%w: no tunnel has the domain %s", ErrRefused, domain)
	case err != nil:
		return nil, true, err
	case t.ArchivedAt != nil:
		return nil, true, fmt.Errorf("%w: tunnel %s (%s) is archived", ErrRefused, t.ID, domain)
	}
	certs, err := h.cfg.Store.TunnelCertificateList(ctx, t.ID, &store.ListParams{Limit: store.MaxTunnelCertificates + 1})
	if err != nil {
		return nil, true, err
	}
	roots, n := x509.NewCertPool(), 0
	for _, c := range certs {
		if c.ArchivedAt == nil && roots.AppendCertsFromPEM([]byte(c.PEM)) {
			n++
		}
	}
	if n == 0 {
		return nil, true, fmt.Errorf("%w: tunnel %s has no CA certificate: it refuses MCP traffic until one is registered", ErrRefused, t.ID)
	}
	return &Route{hub: h, TunnelID: t.ID, Domain: t.Domain, tokenID: t.TokenID, roots: roots}, true, nil
}

// DialTLS opens a stream to host:port through one of the tunnel's connectors, and TLS over it verified against
// the tunnel's CA certificates for host. Only a connector authenticated with the tunnel's current token is used
// (one with an older token is not used). It gives up after the hub's DialTimeout: the connector may
// never answer, or never speak TLS, and http.Transport's dial context never ends.
func (r *Route) DialTLS(ctx context.Context, host, port string) (net.Conn, error) {
	h := r.hub
	ctx, cancel := context.WithTimeout(ctx, h.cfg.DialTimeout)
	defer cancel()
	// Only a connector of the current token (as the route read it): one of an older token is not used, and is
	// dropped by Revoke or the check. (Dropping it here could drop a connector of a newer token, had the
	// token been rotated since the route was read.)
	l := h.pick(r.TunnelID, r.tokenID)
	if l == nil {
		return nil, fmt.Errorf("%w: no connector of tunnel %s is connected to this server (run `corral tunnel` with the tunnel's token)", ErrRefused, r.TunnelID)
	}
	select {
	case l.streams <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: every stream of the connector's connection is in use: %w", ErrRefused, ctx.Err())
	}
	if n := l.sess.NumStreams(); n >= 2*cap(l.streams) {
		// The streams this side closed stay until the connector closes them too, holding what it sends.
		<-l.streams
		_ = l.sess.Close()
		h.cfg.Logger.Warn("tunnel connector dropped: it keeps streams open", "tunnel", r.TunnelID, "streams", n)
		return nil, fmt.Errorf("%w: the connector of tunnel %s kept %d streams open and was dropped", ErrRefused, r.TunnelID, n)
	}
	s, err := l.sess.OpenStream()
	if err != nil {
		<-l.streams
		return nil, fmt.Errorf("%w: the connector's connection failed: %w", ErrRefused, err)
	}
	c := &stream{Stream: s, release: func() { <-l.streams }}
	fail := func(err error) (net.Conn, error) { _ = c.Close(); return nil, err }
	if dl, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = s.SetDeadline(time.Now()) })
	defer stop()
	if err := writeLine(s, openLine{Host: host, Port: port}); err != nil {
		return fail(fmt.Errorf("%w: the connector's connection failed: %w", ErrRefused, err))
	}
	var acc acceptLine
	if err := readLine(s, &acc); err != nil {
		return fail(fmt.Errorf("%w: the connector did not answer: %w", ErrRefused, err))
	}
	if acc.Error != "" {
		return fail(fmt.Errorf("%w: the connector refused %s: %s", ErrRefused, host, acc.Error))
	}
	tc := tls.Client(c, &tls.Config{ServerName: host, RootCAs: r.roots, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}})
	if err := tc.HandshakeContext(ctx); err != nil {
		return fail(fmt.Errorf("%w: TLS with %s through the tunnel: %w", ErrRefused, host, err))
	}
	_ = s.SetDeadline(time.Time{})
	return tc, nil
}

// pick returns the tunnel's connector authenticated with tokenID with the fewest open streams, or nil.
func (h *Hub) pick(tunnelID, tokenID string) *link {
	h.mu.Lock()
	defer h.mu.Unlock()
	var best *link
	for _, l := range h.links[tunnelID] {
		if l.tokenID == tokenID && l.usable() && (best == nil || len(l.streams) < len(best.streams)) {
			best = l
		}
	}
	return best
}

// stream is a yamux stream that gives its slot back once closed.
type stream struct {
	*yamux.Stream
	once    sync.Once
	release func()
}

func (s *stream) Close() error {
	err := s.Stream.Close()
	s.once.Do(s.release)
	return err
}

func writeError(w http.ResponseWriter, status int, typ apitype.ErrorType, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(apitype.ErrorEnvelope{Type: apitype.ObjectError, Error: apitype.ErrorDetail{Type: typ, Message: msg}})
}
