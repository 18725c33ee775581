package egress

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/sandbox"
)

// hostRecorder is an upstream that records the Host and X-Injected of every request it receives.
type hostRecorder struct {
	mu    sync.Mutex
	hosts []string
}

func (h *hostRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.hosts = append(h.hosts, r.Host+" "+r.Header.Get("X-Injected"))
	h.mu.Unlock()
	fmt.Fprint(w, "upstream")
}

func (h *hostRecorder) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.hosts
	h.hosts = nil
	return out
}

// Inside an intercepted connection, a request is forwarded (and rewritten) only for the host the connection
// was opened for: a Host header, an absolute-form URI's authority or an SNI the sandbox chose is refused
// before anything reaches an upstream or the Interceptor (issue 21, item 1: an upstream received
// Host: evil.example with the real secret). Plain HTTP is never given to the Interceptor (item 2).
func TestInterceptHostIsTheConnections(t *testing.T) {
	t.Parallel()
	var rec hostRecorder
	up := httptest.NewTLSServer(&rec)
	t.Cleanup(up.Close)
	plain := httptest.NewServer(&rec)
	t.Cleanup(plain.Close)
	upAddr := strings.TrimPrefix(up.URL, "https://")
	plainAddr := strings.TrimPrefix(plain.URL, "http://")
	cert, _ := selfSigned(t)
	fake := &fakeInterceptor{hosts: map[string]bool{"127.0.0.1": true}, cert: cert}
	sock := filepath.Join(t.TempDir(), "p.sock")
	p, err := Listen(Config{Path: sock, UID: -1, GID: -1, Policy: Policy{AllowAll: true},
		Egress: &sandbox.Egress{AllowInternal: []string{upAddr, plainAddr}, RootCAs: poolOf(up.Certificate()), Intercept: fake}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })

	// send opens a CONNECT to upAddr, TLS with sni, writes raw and returns the status of the answer.
	send := func(t *testing.T, sni, raw string) (int, error) {
		t.Helper()
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %[1]s\r\n\r\n", upAddr)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		tc := tls.Client(&bufferedConn{Conn: c, r: br}, &tls.Config{ServerName: sni, InsecureSkipVerify: true})
		if err := tc.Handshake(); err != nil {
			return 0, err
		}
		if _, err := io.WriteString(tc, raw); err != nil {
			return 0, err
		}
		resp, err = http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	for _, tc := range []struct {
		name, sni, raw string
		ok             bool
	}{
		{"own Host", "", "GET / HTTP/1.1\r\nHost: " + upAddr + "\r\n\r\n", true},
		{"own Host, SNI", "127.0.0.1", "GET / HTTP/1.1\r\nHost: " + upAddr + "\r\n\r\n", true},
		{"Host evil.example", "", "GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n", false},
		{"Host of another port", "", "GET / HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n", false},
		{"absolute-form evil.example", "", "GET https://evil.example/ HTTP/1.1\r\nHost: " + upAddr + "\r\n\r\n", false},
		{"SNI evil.example", "evil.example", "GET / HTTP/1.1\r\nHost: " + upAddr + "\r\n\r\n", false},
	} {
		before := fake.rewrites.Load()
		status, err := send(t, tc.sni, tc.raw)
		got := rec.take()
		rewrites := fake.rewrites.Load() - before
		if tc.ok {
			if err != nil || status != 200 || len(got) != 1 || rewrites != 1 {
				t.Errorf("%s: %d %v, upstream saw %q, %d rewrites; want 200, one request", tc.name, status, err, got, rewrites)
			}
			continue
		}
		if err == nil && status != http.StatusMisdirectedRequest {
			t.Errorf("%s: %d, want 421 (or no handshake)", tc.name, status)
		}
		if len(got) != 0 || rewrites != 0 {
			t.Errorf("%s: upstream saw %q after %d rewrites; want no request at all", tc.name, got, rewrites)
		}
	}

	// Plain HTTP to a host the Interceptor claims goes out as sent: no Rewrite.
	before := fake.rewrites.Load()
	resp, err := proxyClient(sock, nil).Get(plain.URL + "/p")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := rec.take(); len(got) != 1 || strings.Contains(got[0], "yes:") || fake.rewrites.Load() != before {
		t.Errorf("plain HTTP to an intercepted host: upstream saw %q, %d rewrites", got, fake.rewrites.Load()-before)
	}
}

func poolOf(c *x509.Certificate) *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return pool
}
