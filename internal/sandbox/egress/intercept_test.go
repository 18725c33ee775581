package egress

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/sandbox"
)

// fakeInterceptor claims the hosts it lists, presents one self-signed certificate, and marks what it rewrites.
type fakeInterceptor struct {
	hosts    map[string]bool
	cert     *tls.Certificate
	rewrites atomic.Int32
}

func (f *fakeInterceptor) Intercepts(host, port string) bool { return f.hosts[host] }

func (f *fakeInterceptor) Certificate(string) (*tls.Certificate, error) { return f.cert, nil }

func (f *fakeInterceptor) Rewrite(req *http.Request) error {
	f.rewrites.Add(1)
	req.Header.Set("X-Injected", "yes:"+req.URL.Host)
	return nil
}

func selfSigned(t *testing.T) (*tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "intercept"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// proxyClient is an HTTP client that goes through the proxy on sock and trusts roots.
func proxyClient(sock string, roots *x509.CertPool) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "proxy"}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		ForceAttemptHTTP2: false,
		DisableKeepAlives: false,
	}}
}

func TestIntercept(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "got %s %s|", r.Header.Get("X-Injected"), r.URL.Path)
		if r.URL.Path == "/stream" {
			w.(http.Flusher).Flush()
			<-release
			fmt.Fprint(w, "second")
		}
	}))
	up.StartTLS()
	t.Cleanup(up.Close)
	upAddr := strings.TrimPrefix(up.URL, "https://")
	upRoots := x509.NewCertPool()
	upRoots.AddCert(up.Certificate())
	cert, fakeRoots := selfSigned(t)
	fake := &fakeInterceptor{hosts: map[string]bool{"127.0.0.1": true}, cert: cert}

	listen := func(t *testing.T, policy Policy, eg *sandbox.Egress) string {
		sock := filepath.Join(t.TempDir(), "p.sock")
		p, err := Listen(Config{Path: sock, UID: -1, GID: -1, Policy: policy, Egress: eg})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return sock
	}
	eg := &sandbox.Egress{AllowInternal: []string{upAddr}, RootCAs: upRoots, Intercept: fake}
	sock := listen(t, Policy{AllowAll: true}, eg)

	t.Run("TerminatedAndRewritten", func(t *testing.T) {
		c := proxyClient(sock, fakeRoots)
		for _, path := range []string{"/a", "/b"} {
			resp, err := c.Get(up.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if want := "got yes:" + upAddr + " " + path + "|"; string(b) != want {
				t.Errorf("%s: %q, want %q", path, b, want)
			}
			if !resp.TLS.PeerCertificates[0].Equal(cert.Leaf) {
				t.Errorf("the client did not see the interceptor's certificate")
			}
		}
		if n := fake.rewrites.Load(); n < 2 {
			t.Errorf("%d rewrites", n)
		}
	})
	t.Run("Streaming", func(t *testing.T) {
		resp, err := proxyClient(sock, fakeRoots).Get(up.URL + "/stream")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		first, err := br.ReadString('|')
		if err != nil || !strings.HasSuffix(first, "/stream|") {
			t.Fatalf("first part: %q, %v", first, err)
		}
		close(release) // the upstream finishes only after the first part reached the client
		rest, _ := io.ReadAll(br)
		if string(rest) != "second" {
			t.Errorf("rest: %q", rest)
		}
	})
	t.Run("UpstreamUnverified", func(t *testing.T) {
		sock := listen(t, Policy{AllowAll: true}, &sandbox.Egress{AllowInternal: []string{upAddr}, Intercept: fake})
		resp, err := proxyClient(sock, fakeRoots).Get(up.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("an upstream the roots do not verify: %d, want 502", resp.StatusCode)
		}
	})
	t.Run("PolicyStillApplies", func(t *testing.T) {
		for name, eg := range map[string]*sandbox.Egress{
			"not listed":      {AllowInternal: []string{upAddr}, RootCAs: upRoots, Intercept: fake},
			"not trusted":     {RootCAs: upRoots, Intercept: fake},
			"other port only": {AllowInternal: []string{"127.0.0.1:1"}, RootCAs: upRoots, Intercept: fake},
		} {
			policy := Policy{AllowAll: true}
			if name == "not listed" {
				policy = Policy{Hosts: []string{"example.invalid"}}
			}
			_, err := proxyClient(listen(t, policy, eg), fakeRoots).Get(up.URL + "/")
			if err == nil || !strings.Contains(err.Error(), "Forbidden") {
				t.Errorf("%s: %v, want a 403 to CONNECT", name, err)
			}
		}
	})
	t.Run("NotInterceptedTunnels", func(t *testing.T) {
		sock := listen(t, Policy{AllowAll: true}, &sandbox.Egress{AllowInternal: []string{upAddr},
			Intercept: &fakeInterceptor{hosts: map[string]bool{"api.example.com": true}, cert: cert}})
		resp, err := proxyClient(sock, upRoots).Get(up.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "got  /|" || !resp.TLS.PeerCertificates[0].Equal(up.Certificate()) {
			t.Errorf("not intercepted: %q", b)
		}
	})
	t.Run("NotTLSTunnels", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err == nil {
				_, _ = io.Copy(c, c)
				c.Close()
			}
		}()
		sock := listen(t, Policy{AllowAll: true}, &sandbox.Egress{AllowInternal: []string{ln.Addr().String()}, Intercept: fake})
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %[1]s\r\n\r\nping", ln.Addr())
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		buf := make([]byte, 4)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
			t.Errorf("echo through a non-TLS intercepted tunnel: %q, %v", buf, err)
		}
	})
	t.Run("ServerFirstTunnels", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err == nil {
				fmt.Fprint(c, "220 banner\r\n")
				_, _ = io.Copy(io.Discard, c)
				c.Close()
			}
		}()
		sock := listen(t, Policy{AllowAll: true}, &sandbox.Egress{AllowInternal: []string{ln.Addr().String()}, Intercept: fake})
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %[1]s\r\n\r\n", ln.Addr())
		br := bufio.NewReader(c)
		if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		_ = c.SetReadDeadline(time.Now().Add(clientFirst + 5*time.Second))
		if line, err := br.ReadString('\n'); err != nil || line != "220 banner\r\n" {
			t.Errorf("a server-first protocol through an intercepted tunnel: %q, %v", line, err)
		}
	})
	t.Run("PlainHTTPNotRewritten", func(t *testing.T) {
		// Secrets go only inside TLS the proxy terminates (issue 21, item 2): plain HTTP goes out as sent.
		plain := httptest.NewServer(up.Config.Handler)
		defer plain.Close()
		sock := listen(t, Policy{AllowAll: true}, &sandbox.Egress{AllowInternal: []string{strings.TrimPrefix(plain.URL, "http://")}, Intercept: fake})
		resp, err := proxyClient(sock, nil).Get(plain.URL + "/p")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "got  /p|" {
			t.Errorf("plain HTTP to an intercepted host: %q, want it as sent", b)
		}
	})
}

func TestPolicyAllowInternal(t *testing.T) {
	t.Parallel()
	trusted := []string{"127.0.0.1:8443", "Git.Internal.Test:443"}
	for _, tc := range []struct {
		policy     Policy
		host, port string
		denied     bool
	}{
		{Policy{AllowAll: true, AllowInternal: trusted}, "127.0.0.1", "8443", false},
		{Policy{AllowAll: true, AllowInternal: trusted}, "127.0.0.1", "8444", true},
		{Policy{AllowAll: true, AllowInternal: trusted}, "10.0.0.1", "8443", true},
		// Trusted as internal, but the environment's allowed_hosts still apply.
		{Policy{Hosts: []string{"example.com"}, AllowInternal: trusted}, "127.0.0.1", "8443", true},
	} {
		_, err := tc.policy.check(context.Background(), tc.host, tc.port)
		if denied := errors.Is(err, ErrDenied); denied != tc.denied {
			t.Errorf("%+v %s:%s: err = %v, want denied %v", tc.policy, tc.host, tc.port, err, tc.denied)
		}
	}
}
