package egress

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/corralhq/corral/internal/sandbox"
)

// proxyClient is an HTTP client that sends every request through the proxy on sock.
func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Requests for sandbox.LocalHost go to Egress.Local, in plain HTTP only; every other destination keeps the
// policy, with the operator's AllowInternal pairs reachable and no other internal address.
func TestLocalAndAllowInternal(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "upstream") }))
	defer up.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "other") }))
	defer other.Close()
	upHost := strings.TrimPrefix(up.URL, "http://")

	sock := filepath.Join(t.TempDir(), "proxy.sock")
	local := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "local %s %s proxy-auth=%q", r.Method, r.URL.Path, r.Header.Get("Proxy-Authorization"))
	})
	p, err := Listen(Config{Path: sock, UID: -1, GID: -1, Policy: Policy{AllowAll: true},
		Egress: &sandbox.Egress{AllowInternal: []string{upHost}, Local: local}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := proxyClient(sock, nil)
	defer c.CloseIdleConnections()

	req, _ := http.NewRequest("GET", "http://"+sandbox.LocalHost+"/git/x/info/refs", nil)
	req.Header.Set("Proxy-Authorization", "Basic c2VjcmV0")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != `local GET /git/x/info/refs proxy-auth=""` {
		t.Errorf("local: %d %q", resp.StatusCode, b)
	}
	if code, body := get(t, c, "http://CORRAL.internal./git/y"); code != 200 || !strings.HasPrefix(body, "local GET /git/y") {
		t.Errorf("local, other spelling: %d %q", code, body)
	}
	// No tunnel to the local name: an https:// URL is a CONNECT.
	if code, body := get(t, c, "https://"+sandbox.LocalHost+"/git/x/info/refs"); code == 200 || strings.Contains(body, "local") {
		t.Errorf("CONNECT to the local name: %d %q", code, body)
	}
	if code, body := get(t, c, up.URL+"/"); code != 200 || body != "upstream" {
		t.Errorf("trusted internal pair: %d %q", code, body)
	}
	if code, body := get(t, c, other.URL+"/"); code != http.StatusForbidden || strings.Contains(body, "other") {
		t.Errorf("untrusted internal address: %d %q", code, body)
	}

	// Without Local, the local name answers 404 and is never resolved or forwarded.
	sock2 := filepath.Join(t.TempDir(), "proxy.sock")
	var refusedMu sync.Mutex
	var refused []string
	p2, err := Listen(Config{Path: sock2, UID: -1, GID: -1, Policy: Policy{AllowAll: true},
		Refused: func(host string, err error) {
			refusedMu.Lock()
			defer refusedMu.Unlock()
			refused = append(refused, host+" "+err.Error())
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	c2 := proxyClient(sock2, nil)
	defer c2.CloseIdleConnections()
	if code, body := get(t, c2, "http://"+sandbox.LocalHost+"/git/x"); code != http.StatusNotFound || !strings.Contains(body, "no service") {
		t.Errorf("local without a service: %d %q", code, body)
	}
	// The refusal names the operator's flag that would allow the pair, to the client and to Config.Refused.
	flag := "--egress-allow-internal " + upHost
	if code, body := get(t, c2, up.URL+"/"); code != http.StatusForbidden || !strings.Contains(body, flag) {
		t.Errorf("internal address without AllowInternal: %d %q, want a 403 naming %q", code, body, flag)
	}
	refusedMu.Lock()
	defer refusedMu.Unlock()
	if len(refused) != 1 || !strings.HasPrefix(refused[0], upHost+" ") || !strings.Contains(refused[0], flag) {
		t.Errorf("Refused got %q, want one refusal of %s naming %q", refused, upHost, flag)
	}
}

// An exact allowed_hosts entry, by name or by address, is checked after resolution like any other destination
// (issue 14, item 9): a name that resolves to loopback (rebinding, split-horizon DNS) reaches nothing there, over
// plain HTTP or CONNECT, on any port; the operator's AllowInternal pair does.
func TestExactHostStillChecked(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "internal-service") }))
	defer up.Close()
	addr := strings.TrimPrefix(up.URL, "http://")
	_, port, _ := net.SplitHostPort(addr)
	byName := "localhost:" + port
	for _, tc := range []struct {
		name   string
		policy Policy
		url    string
		want   int
	}{
		{"name", Policy{Hosts: []string{"localhost"}}, "http://" + byName + "/", http.StatusForbidden},
		{"name:port", Policy{Hosts: []string{byName}}, "http://" + byName + "/", http.StatusForbidden},
		{"address:port", Policy{Hosts: []string{addr}}, up.URL + "/", http.StatusForbidden},
		{"name, CONNECT", Policy{Hosts: []string{byName}}, "https://" + byName + "/", 0},
		{"address, CONNECT", Policy{Hosts: []string{addr}}, "https://" + addr + "/", 0},
		{"name:port trusted", Policy{Hosts: []string{byName}, AllowInternal: []string{byName}}, "http://" + byName + "/", http.StatusOK},
		{"address:port trusted", Policy{Hosts: []string{addr}, AllowInternal: []string{addr}}, up.URL + "/", http.StatusOK},
	} {
		sock := filepath.Join(t.TempDir(), "proxy.sock")
		p, err := Listen(Config{Path: sock, UID: -1, GID: -1, Policy: tc.policy})
		if err != nil {
			t.Fatal(err)
		}
		c := proxyClient(sock, nil)
		code, body := get(t, c, tc.url)
		c.CloseIdleConnections()
		p.Close()
		switch {
		case tc.want == http.StatusOK && (code != 200 || body != "internal-service"):
			t.Errorf("%s: %d %q, want the service", tc.name, code, body)
		case tc.want == http.StatusForbidden && (code != http.StatusForbidden || strings.Contains(body, "internal-service")):
			t.Errorf("%s: %d %q, want 403", tc.name, code, body)
		case tc.want == 0 && (code != 0 || !strings.Contains(body, "Forbidden")):
			// A refused CONNECT is an error of the client's transport that names the 403.
			t.Errorf("%s: %d %q, want a 403 to CONNECT", tc.name, code, body)
		}
	}
}
