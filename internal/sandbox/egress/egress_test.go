package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
)

func TestPolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		policy Policy
		host   string
		port   string
		denied bool
	}{
		{"unrestricted public IP", Policy{AllowAll: true}, "93.184.216.34", "443", false},
		{"unrestricted loopback", Policy{AllowAll: true}, "127.0.0.1", "5432", true},
		{"unrestricted localhost name", Policy{AllowAll: true}, "localhost", "80", true},
		{"unrestricted metadata", Policy{AllowAll: true}, "169.254.169.254", "80", true},
		{"unrestricted private", Policy{AllowAll: true}, "10.1.2.3", "80", true},
		{"unrestricted v6 loopback", Policy{AllowAll: true}, "::1", "80", true},
		{"unrestricted v4-mapped loopback", Policy{AllowAll: true}, "::ffff:127.0.0.1", "80", true},
		{"unrestricted cgnat", Policy{AllowAll: true}, "100.100.100.100", "80", true},
		{"unrestricted nat64 of loopback", Policy{AllowAll: true}, "64:ff9b::7f00:1", "80", true},
		{"limited listed", Policy{Hosts: []string{"93.184.216.34"}}, "93.184.216.34", "443", false},
		{"limited unlisted", Policy{Hosts: []string{"93.184.216.34"}}, "93.184.216.35", "443", true},
		{"limited port mismatch", Policy{Hosts: []string{"93.184.216.34:443"}}, "93.184.216.34", "80", true},
		// An environment's allowed_hosts never make an internal address reachable, however exact the entry
		// (issue 14, item 9): only the operator's AllowInternal pairs do.
		{"limited exact loopback", Policy{Hosts: []string{"127.0.0.1:8080"}}, "127.0.0.1", "8080", true},
		{"limited exact loopback, trusted", Policy{Hosts: []string{"127.0.0.1:8080"}, AllowInternal: []string{"127.0.0.1:8080"}}, "127.0.0.1", "8080", false},
		{"limited exact name to loopback", Policy{Hosts: []string{"localhost"}}, "localhost", "5432", true},
		{"limited exact name:port to loopback", Policy{Hosts: []string{"localhost:6379"}}, "localhost", "6379", true},
		{"limited exact name, trailing dot", Policy{Hosts: []string{"localhost."}}, "localhost.", "5432", true},
		{"limited exact name, trailing dot, trusted", Policy{Hosts: []string{"localhost."}, AllowInternal: []string{"localhost:5432"}}, "localhost.", "5432", false},
		{"limited exact v6 loopback", Policy{Hosts: []string{"[::1]:8080"}}, "::1", "8080", true},
		{"limited exact private", Policy{Hosts: []string{"10.1.2.3"}}, "10.1.2.3", "80", true},
		{"limited exact metadata", Policy{Hosts: []string{"169.254.169.254"}}, "169.254.169.254", "80", true},
		{"limited wildcard suffix only", Policy{Hosts: []string{"*.example.com"}}, "evilexample.com", "80", true},
		{"trusted internal pair", Policy{AllowAll: true, AllowInternal: []string{"127.0.0.1:8443"}}, "127.0.0.1", "8443", false},
		{"trusted pair by name", Policy{AllowAll: true, AllowInternal: []string{"LocalHost:8443"}}, "localhost", "8443", false},
		{"trusted v6 pair", Policy{AllowAll: true, AllowInternal: []string{"[::1]:8443"}}, "::1", "8443", false},
		{"trusted pair, other port", Policy{AllowAll: true, AllowInternal: []string{"127.0.0.1:8443"}}, "127.0.0.1", "5432", true},
		{"trusted pair, other host", Policy{AllowAll: true, AllowInternal: []string{"127.0.0.1:8443"}}, "10.0.0.1", "8443", true},
		{"trusted pair without port", Policy{AllowAll: true, AllowInternal: []string{"127.0.0.1"}}, "127.0.0.1", "8443", true},
		{"trusted pair, host not allowed", Policy{Hosts: []string{"a.test"}, AllowInternal: []string{"127.0.0.1:8443"}}, "127.0.0.1", "8443", true},
	} {
		_, err := tc.policy.check(context.Background(), tc.host, tc.port)
		if denied := errors.Is(err, ErrDenied); denied != tc.denied {
			t.Errorf("%s: err = %v, denied %v, want %v", tc.name, err, denied, tc.denied)
		}
	}
}

func TestPolicyFor(t *testing.T) {
	t.Parallel()
	if !PolicyFor(nil).AllowAll || !PolicyFor(&apitype.Networking{Type: "unrestricted"}).AllowAll {
		t.Error("unrestricted")
	}
	p := PolicyFor(&apitype.Networking{Type: "limited", AllowedHosts: []string{"a.test"}})
	if p.AllowAll || len(p.Hosts) != 1 {
		t.Errorf("limited: %+v", p)
	}
}

// The host's own addresses reach the server's listening ports (its API, its database) whatever range they are
// in: every policy refuses every one of them, an exact allowed_hosts entry too; only an AllowInternal pair
// reaches one.
func TestPolicyRefusesHostAddresses(t *testing.T) {
	t.Parallel()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		host := ipn.IP.String()
		if _, err := (Policy{AllowAll: true}).check(context.Background(), host, "5432"); !errors.Is(err, ErrDenied) {
			t.Errorf("unrestricted policy to the host's own address %s: err = %v, want denied", host, err)
		}
		if v4 := ipn.IP.To4(); v4 != nil {
			mapped := "::ffff:" + v4.String()
			if _, err := (Policy{AllowAll: true}).check(context.Background(), mapped, "5432"); !errors.Is(err, ErrDenied) {
				t.Errorf("unrestricted policy to the host's own address %s: err = %v, want denied", mapped, err)
			}
		}
		if _, err := (Policy{Hosts: []string{"*.example.com", host}}).check(context.Background(), host, "5432"); !errors.Is(err, ErrDenied) {
			t.Errorf("exact entry %s: err = %v, want denied", host, err)
		}
		trusted := Policy{Hosts: []string{"*.example.com", host}, AllowInternal: []string{net.JoinHostPort(host, "5432")}}
		if _, err := trusted.check(context.Background(), host, "5432"); err != nil {
			t.Errorf("exact entry %s trusted by AllowInternal: %v", host, err)
		}
	}
}

// TestPolicyDialContext: DialContext connects only where the policy allows, to the addresses it checked.
func TestPolicyDialContext(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	ctx := context.Background()

	if c, err := (Policy{AllowAll: true}).DialContext(ctx, "tcp", addr); !errors.Is(err, ErrDenied) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("untrusted loopback: err = %v, want denied", err)
	}
	if _, err := (Policy{AllowAll: true, AllowInternal: []string{addr}}).DialContext(ctx, "udp", addr); err == nil || errors.Is(err, ErrDenied) {
		t.Fatalf("udp: err = %v, want an unsupported network", err)
	}
	// A trusted name is dialed at the address the policy resolved it to.
	p := Policy{AllowAll: true, AllowInternal: []string{"hook.test:" + port},
		lookup: func(context.Context, string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		}}
	c, err := p.DialContext(ctx, "tcp", net.JoinHostPort("hook.test", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The first connection the listener accepts is this one: the refused dials never reached it.
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.RemoteAddr().String() != c.LocalAddr().String() {
		t.Fatalf("accepted %s first, want %s", s.RemoteAddr(), c.LocalAddr())
	}
}
