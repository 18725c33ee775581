// Package egress is the proxy through which a sandbox reaches the network. A sandbox has no network of its own;
// the host runs one Proxy per sandbox on a Unix socket bound into it, and the in-sandbox agent bridges
// 127.0.0.1:3128 to that socket. The proxy speaks HTTP CONNECT and plain (absolute-URI) HTTP, resolves names
// itself, and enforces the environment's policy: `limited` allows only the listed hosts, `unrestricted` allows
// any public host. Every destination, allowed by name or not, is checked after resolution, and the connection
// goes to the addresses checked: loopback, private, link-local and other internal addresses are refused, and so
// are the addresses of the host's own interfaces, so a sandbox can never reach the server, its database or a
// metadata service, even through a listed name that resolves there; only the operator may trust exact internal
// host:port pairs (Policy.AllowInternal). Requests for sandbox.LocalHost are not forwarded: the proxy hands them to the
// sandbox's local services (sandbox.Egress.Local, the git endpoint), in plain HTTP only.
package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
)

// Policy decides which destinations a sandbox may reach.
type Policy struct {
	// AllowAll allows every public destination (networking type unrestricted).
	AllowAll bool
	// Hosts are the allowed hosts (networking type limited): "example.com", "example.com:443",
	// "*.example.com" (any subdomain) or an IP literal. No entry allows an internal address: only AllowInternal
	// does.
	Hosts []string
	// AllowInternal are host:port pairs the operator trusts although they are internal addresses
	// (sandbox.Egress.AllowInternal): they may be reached where the policy allows their host. Every other
	// internal address is still refused.
	AllowInternal []string

	// lookup, if set, resolves names instead of net.DefaultResolver (tests).
	lookup func(ctx context.Context, host string) ([]netip.Addr, error)
}

// PolicyFor returns the policy of an environment's networking config. No config means unrestricted, as in the
// reference API.
func PolicyFor(n *apitype.Networking) Policy {
	if n == nil || n.Type == "" || n.Type == apitype.NetworkingUnrestricted {
		return Policy{AllowAll: true}
	}
	return Policy{Hosts: n.AllowedHosts}
}

// Resolve decides whether the server may reach host:port on a session's behalf under the environment's
// networking (the same rules as the sandbox's proxy: internal and host addresses never, whatever allowed_hosts
// say) and returns the addresses to use, so that a caller can pin them against a second, different DNS answer.
func Resolve(ctx context.Context, n *apitype.Networking, host, port string) ([]net.IP, error) {
	return PolicyFor(n).check(ctx, host, port)
}

// Resolve is the package-level Resolve under a policy built by the caller (one with AllowInternal).
func (p Policy) Resolve(ctx context.Context, host, port string) ([]net.IP, error) {
	return p.check(ctx, host, port)
}

// trusted reports whether host:port is one of the operator's AllowInternal pairs (an IP literal in any of its
// spellings).
func (p Policy) trusted(host, port string) bool {
	ip, ipErr := netip.ParseAddr(host)
	for _, hp := range p.AllowInternal {
		h, pt, err := net.SplitHostPort(strings.ToLower(strings.TrimSpace(hp)))
		if err != nil || pt != port {
			continue
		}
		if h = strings.TrimSuffix(h, "."); h == host {
			return true
		}
		if tip, err := netip.ParseAddr(h); err == nil && ipErr == nil && tip.Unmap() == ip.Unmap() {
			return true
		}
	}
	return false
}

// ErrDenied is returned (wrapped) for a destination the policy refuses.
var ErrDenied = errors.New("destination not allowed")

// check decides whether host:port may be reached, and returns the addresses to dial: the policy allows the name
// (or address), then every address it resolves to is checked, whatever allowed it (addr.go: only global
// unicast, never the host's own networks). An environment's allowed_hosts never make an internal address
// reachable, however exact the entry; only the operator's AllowInternal pairs do. The caller connects to the
// addresses returned, never to a second answer of the DNS.
func (p Policy) check(ctx context.Context, host, port string) ([]net.IP, error) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if err := p.AllowsName(host, port); err != nil {
		return nil, err
	}
	addrs, err := p.resolve(ctx, host)
	if err != nil {
		return nil, err
	}
	if !p.trusted(host, port) {
		nets, err := hostNets()
		if err != nil { // the host's networks unknown: every address may be one of them
			return nil, fmt.Errorf("%w: %s: %w", ErrDenied, host, err)
		}
		for _, a := range addrs {
			if denied(a, nets) {
				hp := net.JoinHostPort(host, port)
				return nil, fmt.Errorf("%w: %s resolves to an internal address (an operator who trusts it allows it with --egress-allow-internal %s)", ErrDenied, hp, hp)
			}
		}
	}
	ips := make([]net.IP, len(addrs))
	for i, a := range addrs {
		ips[i] = net.IP(a.Unmap().AsSlice())
	}
	return ips, nil
}

// resolve returns host's addresses: an IP literal's own, else those of the resolver (Policy.lookup in tests).
func (p Policy) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	lookup := p.lookup
	if lookup == nil {
		lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	addrs, err := lookup(ctx, host)
	if err == nil && len(addrs) == 0 {
		err = errors.New("no address")
	}
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	return addrs, nil
}

// MaxConns bounds the connections one sandbox may hold to its proxy at a time, idle keep-alive ones included,
// so that a sandbox cannot exhaust the server's file descriptors. A connection beyond it waits until one closes.
const MaxConns = 256

// Config configures a Proxy.
type Config struct {
	// Path is the Unix socket to create (mode 0600, owned by UID:GID, which may be -1 to keep the caller's).
	Path     string
	UID, GID int
	// Listener, if set, is served instead of a socket at Path: a TCP endpoint of one sandbox whose processes
	// run on another machine (a pod). Whoever makes it decides who may connect; the Proxy closes it.
	Listener net.Listener
	// Policy is the environment's networking policy (PolicyFor).
	Policy Policy
	// Egress is what the host adds to the policy (sandbox.Recipe.Egress): its AllowInternal extends the
	// policy's, its AllowHosts the hosts of a limited one, its Local serves the requests for sandbox.LocalHost, its Intercept gets the requests to the
	// destinations it claims (intercept.go). Nil adds nothing.
	Egress *sandbox.Egress
	// Logger receives refusals; default discards.
	Logger *slog.Logger
	// Refused, if set, is called with each destination refused and why (as logged), from the proxy's
	// goroutines: the image builder names them in a failed build's message, where clients show only a 403.
	Refused func(host string, err error)
}

// Proxy is one sandbox's egress proxy, on a Unix socket or the TCP listener it was given.
type Proxy struct {
	policy   Policy
	local    http.Handler
	logger   *slog.Logger
	onRefuse func(host string, err error) // Config.Refused, or nil
	egress   *sandbox.Egress              // nil: the policy alone
	itr      *http.Transport              // upstream of intercepted requests (intercept.go)
	ln       net.Listener
	srv      *http.Server
	tr       *http.Transport
	done     chan struct{}

	mu     sync.Mutex
	tunnel map[net.Conn]struct{}
	closed bool
}

// Listen starts a proxy on a new Unix socket (Config.Path), or on Config.Listener.
func Listen(cfg Config) (*Proxy, error) {
	path, uid, gid, policy, logger := cfg.Path, cfg.UID, cfg.GID, cfg.Policy, cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var local http.Handler
	if e := cfg.Egress; e != nil {
		policy.AllowInternal = append(slices.Clip(policy.AllowInternal), e.AllowInternal...)
		if !policy.AllowAll {
			policy.Hosts = append(slices.Clip(policy.Hosts), e.AllowHosts...)
		}
		local = e.Local
	}
	ln := cfg.Listener
	if ln == nil {
		var err error
		if ln, err = listenUnix(path, uid, gid); err != nil {
			return nil, err
		}
	}
	p := &Proxy{policy: policy, local: local, logger: logger, onRefuse: cfg.Refused, egress: cfg.Egress, ln: ln, done: make(chan struct{}), tunnel: map[net.Conn]struct{}{}}
	p.itr = p.interceptTransport()
	p.tr = &http.Transport{
		Proxy:                 nil,
		DialContext:           p.dial,
		ForceAttemptHTTP2:     false,
		MaxIdleConns:          8,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 5 * time.Minute,
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: time.Minute,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelDebug)}
	go func() {
		defer close(p.done)
		_ = p.srv.Serve(&limitListener{Listener: ln, slots: make(chan struct{}, MaxConns), closed: make(chan struct{})})
	}()
	return p, nil
}

// listenUnix listens on a new Unix socket at path that only uid:gid may connect to.
func listenUnix(path string, uid, gid int) (net.Listener, error) {
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("egress: listen: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("egress: chmod socket: %w", err)
	}
	if err := os.Lchown(path, uid, gid); err != nil {
		ln.Close()
		return nil, fmt.Errorf("egress: chown socket: %w", err)
	}
	return ln, nil
}

// Close stops the proxy and cuts every connection through it. Idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	for c := range p.tunnel {
		c.Close()
	}
	p.mu.Unlock()
	err := p.srv.Close()
	<-p.done
	p.tr.CloseIdleConnections()
	p.itr.CloseIdleConnections()
	if p.ln.Addr().Network() == "unix" {
		_ = os.Remove(p.ln.Addr().String())
	}
	return err
}

func (p *Proxy) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	return p.policy.DialContext(ctx, network, addr)
}

// dialTimeout bounds the connection attempt to one address (ctx bounds them all).
const dialTimeout = 10 * time.Second

// Transport is an HTTP transport that reaches destinations on a session's or the operator's behalf under the
// policy: every connection through DialContext, no Proxy (one would be dialed instead of the destination,
// unchecked), TLS 1.2 or later verified against roots (nil: the system's), handshakes bounded by handshake and
// response headers by 64 KiB, so that no destination makes the caller hold more. Callers set what else they
// need (idle connections, response header timeouts).
func (p Policy) Transport(roots *x509.CertPool, handshake time.Duration) *http.Transport {
	return &http.Transport{
		Proxy:                  nil,
		DialContext:            p.DialContext,
		TLSClientConfig:        &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    handshake,
		ForceAttemptHTTP2:      true,
		MaxResponseHeaderBytes: 64 << 10,
	}
}

// DialContext connects to addr (host:port) if the policy allows it: it resolves the host and checks every
// address (Resolve), then dials only those addresses, one after the other, never a second DNS answer. It is
// the DialContext of an http.Transport that reaches destinations on a session's behalf (the proxies outside a
// sandbox, the webhook sender); such a transport must have no Proxy, which would be dialed instead. Only TCP
// networks are dialed. A refused destination's error wraps ErrDenied.
func (p Policy) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, fmt.Errorf("dial %s: network %q not supported", addr, network)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	ips, err := p.check(ctx, host, port)
	if err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: dialTimeout}
	var last error
	for _, ip := range ips {
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(ip.String(), port))
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, fmt.Errorf("dial %s: %w", addr, last)
}

// limitListener accepts at most cap(slots) connections at a time: Accept waits for a slot, and closing a
// connection (hijacked ones too) frees its slot. Close ends a wait (http.Server.Close waits for Serve to return
// before it closes the connections).
type limitListener struct {
	net.Listener
	slots     chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: sync.OnceFunc(func() { <-l.slots })}, nil
}

type limitConn struct {
	net.Conn
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}

// CloseWrite half-closes the connection, as a CONNECT tunnel does when its destination is done sending.
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// ServeHTTP handles one proxied request: CONNECT tunnels, anything else is forwarded.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if isLocal(r) {
		p.serveLocal(w, r)
		return
	}
	if r.Method == http.MethodConnect {
		p.connect(w, r)
		return
	}
	if r.URL.Host == "" || (r.URL.Scheme != "http" && r.URL.Scheme != "https") {
		http.Error(w, "egress proxy: only absolute http URLs and CONNECT are proxied", http.StatusBadRequest)
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	for _, h := range []string{"Proxy-Connection", "Proxy-Authorization", "Connection", "Keep-Alive", "Te", "Trailer", "Upgrade"} {
		out.Header.Del(h)
	}
	resp, err := p.tr.RoundTrip(out)
	if err != nil {
		p.refuse(w, r, err)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// isLocal reports whether r is for sandbox.LocalHost (as a CONNECT target or an absolute URL).
func isLocal(r *http.Request) bool {
	host := r.URL.Host
	if r.Method == http.MethodConnect {
		host = r.Host
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.EqualFold(strings.TrimSuffix(host, "."), sandbox.LocalHost)
}

// serveLocal hands a request for sandbox.LocalHost to the sandbox's local services, over plain HTTP only: the
// proxy has no certificate for that name, and a tunnel would reach nothing.
func (p *Proxy) serveLocal(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodConnect || r.URL.Scheme != "http":
		http.Error(w, "egress proxy: "+sandbox.LocalHost+" is served over plain http:// only", http.StatusForbidden)
	case p.local == nil:
		http.Error(w, "egress proxy: this sandbox has no service at "+sandbox.LocalHost, http.StatusNotFound)
	default:
		for _, h := range []string{"Proxy-Connection", "Proxy-Authorization"} {
			r.Header.Del(h)
		}
		p.local.ServeHTTP(w, r)
	}
}

// refused logs a refusal of host and tells Config.Refused.
func (p *Proxy) refused(host string, err error) {
	p.logger.Info("egress refused", "host", host, "err", err)
	if p.onRefuse != nil {
		p.onRefuse(host, err)
	}
}

func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, err error) {
	p.refused(r.Host, err)
	if errors.Is(err, ErrDenied) {
		http.Error(w, "egress proxy: "+err.Error(), http.StatusForbidden)
		return
	}
	http.Error(w, "egress proxy: "+err.Error(), http.StatusBadGateway)
}

func (p *Proxy) connect(w http.ResponseWriter, r *http.Request) {
	if host, port, err := net.SplitHostPort(r.Host); err == nil && p.egress != nil && p.egress.Intercept != nil &&
		p.egress.Intercept.Intercepts(host, port) {
		p.interceptConnect(w, r, host, port)
		return
	}
	up, err := p.dial(r.Context(), "tcp", r.Host)
	if err != nil {
		p.refuse(w, r, err)
		return
	}
	down, buf, ok := establish(w)
	if !ok {
		up.Close()
		return
	}
	if !p.track(up, down) {
		up.Close()
		down.Close()
		return
	}
	defer p.untrack(up, down)
	var pending []byte
	if n := buf.Reader.Buffered(); n > 0 {
		pending, _ = buf.Reader.Peek(n)
	}
	pipe(up, down, pending)
}

// pipe copies both ways between the sandbox's side of a tunnel (down) and its destination (up), pending (what
// the sandbox sent before the tunnel was up) first, until both directions end; each side's write is
// half-closed when its reader ends.
func pipe(up, down net.Conn, pending []byte) {
	done := make(chan struct{}, 2)
	go func() {
		if len(pending) > 0 {
			_, _ = up.Write(pending)
		}
		_, _ = io.Copy(up, down)
		if c, ok := up.(*net.TCPConn); ok {
			_ = c.CloseWrite()
		}
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(down, up)
		if c, ok := down.(interface{ CloseWrite() error }); ok {
			_ = c.CloseWrite()
		}
		done <- struct{}{}
	}()
	<-done
	<-done
}

// established is the reply to a CONNECT the proxy tunnels. A 2xx reply to CONNECT has no content, hence no
// Transfer-Encoding or Content-Length (RFC 9110, 9.3.6), which net/http adds to a header written before Hijack:
// establish writes it on the hijacked connection instead.
const established = "HTTP/1.1 200 Connection established\r\n\r\n"

// establish hijacks the connection of an allowed CONNECT and answers it with established. If it cannot, the
// client has its answer (or its connection is gone) and ok is false.
func establish(w http.ResponseWriter) (down net.Conn, buf *bufio.ReadWriter, ok bool) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "egress proxy: cannot tunnel", http.StatusInternalServerError)
		return nil, nil, false
	}
	down, buf, err := hj.Hijack()
	if err != nil {
		return nil, nil, false
	}
	if _, err = buf.WriteString(established); err == nil {
		err = buf.Flush()
	}
	if err != nil {
		down.Close()
		return nil, nil, false
	}
	return down, buf, true
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range cs {
		p.tunnel[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.tunnel, c)
		c.Close()
	}
}

// AllowsName reports whether the policy allows host:port by its name alone (nil), before any resolution: what a
// destination reached without DNS, as an MCP server through a tunnel, is checked against.
func (p Policy) AllowsName(host, port string) error {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	allowed := p.AllowAll
	for _, h := range p.Hosts {
		h = strings.ToLower(h)
		hh, hp, err := net.SplitHostPort(h)
		if err != nil {
			hh, hp = h, ""
		}
		hh = strings.TrimSuffix(strings.Trim(hh, "[]"), ".")
		if hp != "" && hp != port {
			continue
		}
		switch {
		case hh == host:
			allowed = true
		case strings.HasPrefix(hh, "*.") && strings.HasSuffix(host, hh[1:]):
			allowed = true
		}
	}
	if !allowed {
		return fmt.Errorf("%w: %s is not in the environment's allowed_hosts", ErrDenied, net.JoinHostPort(host, port))
	}
	return nil
}
