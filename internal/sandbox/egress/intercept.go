package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// Interception: for the destinations the sandbox's Egress.Intercept claims, the proxy answers CONNECT itself,
// terminates the sandbox's TLS with a certificate of the host's CA, reads the HTTP/1.1 requests, has the
// Interceptor rewrite them (inject credentials) and forwards them over TLS of its own to the real destination,
// verified against the system roots and Egress.RootCAs. Every destination is still checked against the policy
// after resolution, like any other. Inside such a connection the sandbox reaches only the host it was opened
// for: a TLS server name, Host header or absolute-form URI naming another is refused (421) before the
// Interceptor or any upstream sees the request, since a front end that routes by Host would otherwise hand the
// credentials to the site the sandbox chose. Plain-HTTP requests are never given to the Interceptor: they go
// out as sent, like to any other destination.

// responseScrubber is implemented by Interceptors that also clean the answers (proxy.Injector replaces a
// secret an upstream echoes with its placeholder).
type responseScrubber interface {
	ScrubResponse(req *http.Request, resp *http.Response)
}

// interceptIdle bounds how long an intercepted connection waits for its next request.
const interceptIdle = time.Minute

// clientFirst is how long an intercepted tunnel waits for the client's first bytes (a TLS ClientHello) before
// it takes the protocol for one whose server speaks first and tunnels it untouched. It is generous: a client
// slower than that (a loaded machine: curl took over 3 s to send its ClientHello with both cores busy) would be
// tunnelled and its credentials not injected, while only a server-first protocol (SMTP, FTP) to a host a
// credential allows pays the wait.
const clientFirst = 10 * time.Second

// SameAuthority reports whether authority (a Host header, or an absolute-form URI's host[:port]) names host
// and port; an authority without a port names 443 (the intercepted connections are TLS). Case and a trailing
// dot do not matter; userinfo or any other spelling of host does.
func SameAuthority(authority, host, port string) bool {
	h, p, err := net.SplitHostPort(authority)
	if err != nil {
		h, p = authority, "443"
	}
	return p == port && sameHostName(h, host)
}

func sameHostName(a, b string) bool {
	norm := func(h string) string { return strings.ToLower(strings.TrimSuffix(strings.Trim(h, "[]"), ".")) }
	return norm(a) == norm(b)
}

// interceptTransport is the transport of intercepted requests: it dials through the policy like every other
// connection and verifies the upstream's TLS itself (verifyUpstream), HTTP/1.1 only.
func (p *Proxy) interceptTransport() *http.Transport {
	var roots *x509.CertPool
	if p.egress != nil {
		roots = p.egress.RootCAs
	}
	return &http.Transport{
		Proxy:       nil,
		DialContext: p.dial,
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			raw, err := p.dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			c := tls.Client(raw, &tls.Config{
				ServerName: host,
				NextProtos: []string{"http/1.1"},
				MinVersion: tls.VersionTLS12,
				// Verified by VerifyConnection below, against two pools: crypto/tls takes only one.
				InsecureSkipVerify: true,
				VerifyConnection:   func(cs tls.ConnectionState) error { return verifyUpstream(cs, host, roots) },
			})
			if err := c.HandshakeContext(ctx); err != nil {
				raw.Close()
				return nil, fmt.Errorf("tls to %s: %w", addr, err)
			}
			return c, nil
		},
		TLSNextProto:          map[string]func(string, *tls.Conn) http.RoundTripper{},
		MaxIdleConns:          8,
		IdleConnTimeout:       30 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 5 * time.Minute,
	}
}

// verifyUpstream verifies an upstream's certificate chain for host against the system roots, then against
// extra (Egress.RootCAs) if that is set.
func verifyUpstream(cs tls.ConnectionState, host string, extra *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("upstream sent no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	opts := x509.VerifyOptions{DNSName: host, Intermediates: inter}
	_, err := cs.PeerCertificates[0].Verify(opts)
	if err != nil && extra != nil {
		opts.Roots = extra
		if _, err2 := cs.PeerCertificates[0].Verify(opts); err2 == nil {
			return nil
		}
	}
	return err
}

// interceptConnect answers a CONNECT to host:port that the Interceptor claims: after the policy allows the
// destination, it terminates the sandbox's TLS and serves the requests inside (serveIntercepted). A client
// that does not start TLS gets a plain tunnel, as without interception.
func (p *Proxy) interceptConnect(w http.ResponseWriter, r *http.Request, host, port string) {
	if _, err := p.policy.check(r.Context(), host, port); err != nil {
		p.refuse(w, r, err)
		return
	}
	down, buf, ok := establish(w)
	if !ok {
		return
	}
	if !p.track(down) {
		down.Close()
		return
	}
	defer p.untrack(down)
	// A TLS client speaks first, at once. A protocol whose server speaks first (SSH banners aside, SMTP, ...)
	// sends nothing: after clientFirst it is tunnelled, as is anything that does not start a TLS handshake.
	// The server's reader of the hijacked connection cancels the request's context on a read error (the
	// timeout below): read directly unless it buffered the client's first bytes already.
	// The proxy's Close ends it instead.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	br := buf.Reader
	if br.Buffered() == 0 {
		br = bufio.NewReader(down)
	}
	_ = down.SetReadDeadline(time.Now().Add(clientFirst))
	first, err := br.Peek(1)
	_ = down.SetReadDeadline(time.Time{})
	var ne net.Error
	if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
		return
	}
	in := &bufferedConn{Conn: down, r: br}
	if err != nil || first[0] != 0x16 { // not a TLS handshake record: nothing to rewrite
		p.splice(ctx, in, r.Host)
		return
	}
	intercept := p.egress.Intercept
	c := tls.Server(in, &tls.Config{
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if hello.ServerName != "" && !sameHostName(hello.ServerName, host) {
				return nil, fmt.Errorf("%w: the TLS server name is not %s, the host of the CONNECT", ErrDenied, host)
			}
			return intercept.Certificate(host)
		},
		NextProtos: []string{"http/1.1"},
		MinVersion: tls.VersionTLS12,
	})
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = c.HandshakeContext(hctx)
	cancel()
	if err != nil {
		p.logger.Info("egress intercept handshake failed", "host", host, "err", err)
		return
	}
	p.serveIntercepted(ctx, c, net.JoinHostPort(host, port))
}

// serveIntercepted reads the HTTP/1.1 requests of a terminated TLS connection to hostport and answers each
// with the rewritten request's answer from the real destination. A request that names another host (its Host,
// where an absolute-form URI's authority is too) is answered 421 and the connection closed.
func (p *Proxy) serveIntercepted(ctx context.Context, c *tls.Conn, hostport string) {
	host, port, _ := net.SplitHostPort(hostport)
	state := c.ConnectionState()
	br := bufio.NewReader(c)
	for {
		_ = c.SetReadDeadline(time.Now().Add(interceptIdle))
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_ = c.SetReadDeadline(time.Time{})
		if (req.URL.Host != "" && !SameAuthority(req.URL.Host, host, port)) || (req.Host != "" && !SameAuthority(req.Host, host, port)) {
			p.refused(hostport, errors.New("the request names another host than its connection's"))
			_ = errorResponse(req, http.StatusMisdirectedRequest,
				"egress proxy: this connection is to "+hostport+"; a request in it may not name another host (Host header or request target)").Write(c)
			return
		}
		req = req.WithContext(ctx)
		req.RequestURI = ""
		req.TLS = &state // the Interceptor injects only into requests read from TLS the proxy terminated
		req.URL.Scheme, req.URL.Host = "https", hostport
		for _, h := range []string{"Proxy-Connection", "Proxy-Authorization", "Connection", "Keep-Alive", "Te", "Trailer", "Upgrade", "Expect"} {
			req.Header.Del(h)
		}
		keep := !req.Close
		resp, err := p.roundTripIntercepted(req)
		if err != nil {
			p.refused(hostport, err)
			status := http.StatusBadGateway
			if errors.Is(err, ErrDenied) {
				status = http.StatusForbidden
			}
			_ = errorResponse(req, status, "egress proxy: "+err.Error()).Write(c)
			return
		}
		if resp.ContentLength < 0 && resp.Body != http.NoBody && req.Method != http.MethodHead {
			resp.TransferEncoding = []string{"chunked"}
		}
		resp.Close = resp.Close || !keep
		err = resp.Write(c)
		resp.Body.Close()
		if err != nil || resp.Close {
			return
		}
	}
}

// roundTripIntercepted rewrites req with the Interceptor, sends it to its destination and cleans the answer.
func (p *Proxy) roundTripIntercepted(req *http.Request) (*http.Response, error) {
	if err := p.egress.Intercept.Rewrite(req); err != nil {
		return nil, err
	}
	resp, err := p.itr.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if s, ok := p.egress.Intercept.(responseScrubber); ok {
		s.ScrubResponse(req, resp)
	}
	return resp, nil
}

func errorResponse(req *http.Request, status int, msg string) *http.Response {
	body := msg + "\n"
	return &http.Response{StatusCode: status, ProtoMajor: 1, ProtoMinor: 1, Request: req, Close: true,
		Header:        http.Header{"Content-Type": {"text/plain; charset=utf-8"}},
		ContentLength: int64(len(body)), Body: io.NopCloser(strings.NewReader(body))}
}

// splice tunnels down to addr after the policy allows it, like connect.
func (p *Proxy) splice(ctx context.Context, down net.Conn, addr string) {
	up, err := p.dial(ctx, "tcp", addr)
	if err != nil {
		p.refused(addr, err)
		return
	}
	if !p.track(up) {
		up.Close()
		return
	}
	defer p.untrack(up)
	pipe(up, down, nil)
}

// bufferedConn reads what the server buffered of a hijacked connection before the connection itself.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// CloseWrite half-closes the underlying connection.
func (c *bufferedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
