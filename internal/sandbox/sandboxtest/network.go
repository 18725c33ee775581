package sandboxtest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/sandbox"
)

// RunNetwork checks egress: a sandbox has no network of its own and reaches out only through the host's proxy,
// which enforces the environment's networking policy. Traffic goes only to a local httptest server, an internal
// address: an environment's allowed_hosts alone never reach it, the operator's AllowInternal pair does.
func RunNetwork(t *testing.T, newProvider func(testing.TB) sandbox.Provider) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello-from-host")
	}))
	t.Cleanup(srv.Close)
	hostPort := strings.TrimPrefix(srv.URL, "http://")
	p := newPool(t, newProvider, 0)
	// The pool of a server whose operator trusts the test server (corral serve --egress-allow-internal).
	trusted, err := sandbox.NewPool(sandbox.PoolConfig{Provider: newProvider(t), WorkspaceRoot: WorkspaceRoot(t),
		Egress: egressFunc(func(context.Context, *sandbox.Recipe) (*sandbox.Egress, error) {
			return &sandbox.Egress{AllowInternal: []string{hostPort}}, nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	if err := trusted.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := trusted.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	withNet := func(c *sandbox.Call, n *apitype.Networking) *sandbox.Call {
		c.Recipe.Environment = apitype.EnvConfig{Type: apitype.EnvironmentCloud, Networking: n}
		return c
	}
	viaProxy := "curl -sS --max-time 10 --noproxy '' -x \"$http_proxy\" "
	limited := &apitype.Networking{Type: apitype.NetworkingLimited, AllowedHosts: []string{hostPort}}

	t.Run("LimitedAllowed", func(t *testing.T) {
		if got := mustRun(t, trusted, withNet(bash("allowed", viaProxy+srv.URL+"/"), limited)); got != "hello-from-host" {
			t.Errorf("plain HTTP through the proxy: %q", got)
		}
		// CONNECT tunnel.
		if got := mustRun(t, trusted, withNet(bash("allowed", viaProxy+"-p "+srv.URL+"/"), limited)); got != "hello-from-host" {
			t.Errorf("CONNECT through the proxy: %q", got)
		}
	})
	t.Run("LimitedExactInternalRefused", func(t *testing.T) {
		// The same exact entry, by address and by a name that resolves to it, without the operator's trust.
		_, port, _ := net.SplitHostPort(hostPort)
		for _, n := range []*apitype.Networking{limited, {Type: apitype.NetworkingLimited, AllowedHosts: []string{"localhost:" + port}}} {
			u := "http://" + n.AllowedHosts[0] + "/"
			got := mustFail(t, p, withNet(bash("exact", viaProxy+"-f -w '%{http_code}' "+u), n))
			if strings.Contains(got, "hello-from-host") || !strings.Contains(got, "403") {
				t.Errorf("exact allowed_hosts entry %s, internal: %q", n.AllowedHosts[0], got)
			}
			got = mustFail(t, p, withNet(bash("exact", viaProxy+"-p "+u), n))
			if strings.Contains(got, "hello-from-host") || !strings.Contains(got, "403") {
				t.Errorf("exact allowed_hosts entry %s, internal, CONNECT: %q", n.AllowedHosts[0], got)
			}
		}
	})
	t.Run("LimitedRefused", func(t *testing.T) {
		n := &apitype.Networking{Type: apitype.NetworkingLimited, AllowedHosts: []string{"example.invalid"}}
		got := mustFail(t, p, withNet(bash("refused", viaProxy+"-f -w '%{http_code}' "+srv.URL+"/"), n))
		if strings.Contains(got, "hello-from-host") || !strings.Contains(got, "403") {
			t.Errorf("refused host: %q", got)
		}
		got = mustFail(t, p, withNet(bash("refused", viaProxy+"-p "+srv.URL+"/"), n))
		if strings.Contains(got, "hello-from-host") || !strings.Contains(got, "403") {
			t.Errorf("refused CONNECT: %q", got)
		}
	})
	t.Run("UnrestrictedRefusesLoopback", func(t *testing.T) {
		n := &apitype.Networking{Type: apitype.NetworkingUnrestricted}
		got := mustFail(t, p, withNet(bash("open", viaProxy+"-f -w '%{http_code}' "+srv.URL+"/"), n))
		if strings.Contains(got, "hello-from-host") || !strings.Contains(got, "403") {
			t.Errorf("loopback through an unrestricted proxy: %q", got)
		}
	})
	t.Run("UnrestrictedRefusesHostAddress", func(t *testing.T) {
		// A port the host listens on for every interface, reached through an address of one of them that is
		// in no reserved range (a public address): it is the host all the same.
		ln, err := net.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		hsrv := &http.Server{Handler: srv.Config.Handler}
		go func() { _ = hsrv.Serve(ln) }()
		defer hsrv.Close()
		port := ln.Addr().(*net.TCPAddr).Port
		addrs, err := net.InterfaceAddrs()
		if err != nil {
			t.Fatal(err)
		}
		tried := 0
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok || ipn.IP.To4() == nil || ipn.IP.IsLoopback() || ipn.IP.IsPrivate() || ipn.IP.IsLinkLocalUnicast() {
				continue
			}
			tried++
			url := fmt.Sprintf("http://%s/", net.JoinHostPort(ipn.IP.String(), fmt.Sprint(port)))
			got := mustFail(t, p, withNet(bash("open", viaProxy+"-f -w '%{http_code}' "+url), &apitype.Networking{Type: apitype.NetworkingUnrestricted}))
			if strings.Contains(got, "hello-from-host") || !strings.Contains(got, "403") {
				t.Errorf("the host's address %s through an unrestricted proxy: %q", ipn.IP, got)
			}
		}
		if tried == 0 {
			t.Skip("the host has no IPv4 address outside the reserved ranges")
		}
	})
	t.Run("NoDirectNetwork", func(t *testing.T) {
		got := mustFail(t, p, withNet(bash("direct", "curl -sS --max-time 5 --noproxy '*' "+srv.URL+"/"), limited))
		if strings.Contains(got, "hello-from-host") {
			t.Errorf("direct connection reached the host: %q", got)
		}
	})
}
