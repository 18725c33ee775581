package egress

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Every destination that is not global unicast (the IANA IPv4 and IPv6 special-purpose address registries) is
// refused, in every spelling, whatever the policy allows: an unrestricted policy and an exact allowed_hosts
// entry alike. Global addresses pass, IPv4 ones also in the IPv6 forms that embed them and reach them.
func TestSpecialPurposeAddresses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		host    string
		refused bool
	}{
		// IPv4.
		{"0.0.0.0", true}, {"0.1.2.3", true}, // "this network"
		{"10.0.0.1", true}, {"100.64.0.1", true}, {"100.127.255.254", true},
		{"127.0.0.1", true}, {"127.255.255.254", true},
		{"169.254.169.254", true}, {"172.16.0.1", true}, {"172.31.255.255", true},
		{"192.0.0.1", true}, {"192.0.0.170", true}, // IETF protocol assignments, NAT64 discovery
		{"192.0.2.1", true}, {"198.51.100.1", true}, {"203.0.113.1", true}, // documentation
		{"192.88.99.1", true}, // 6to4 relay anycast
		{"192.168.1.1", true},
		{"198.18.0.1", true}, {"198.19.255.255", true}, // benchmarking
		{"224.0.0.1", true}, {"239.255.255.250", true}, // multicast
		{"240.0.0.1", true}, {"254.255.255.255", true}, // reserved
		{"255.255.255.255", true}, // limited broadcast
		{"8.8.8.8", false}, {"1.1.1.1", false}, {"93.184.216.34", false}, {"100.63.255.255", false},
		{"100.128.0.1", false}, {"172.15.255.255", false}, {"172.32.0.1", false}, {"192.0.1.1", false},
		{"198.17.255.255", false}, {"198.20.0.1", false}, {"223.255.255.254", false},
		// IPv6.
		{"::", true}, {"::1", true},
		{"::127.0.0.1", true}, {"::7f00:1", true}, {"::8.8.8.8", true}, // IPv4-compatible (deprecated)
		{"::ffff:127.0.0.1", true}, {"::ffff:7f00:1", true}, {"::ffff:10.0.0.1", true}, {"::ffff:0.0.0.0", true},
		{"::ffff:169.254.169.254", true}, {"::ffff:255.255.255.255", true},
		{"::ffff:0:7f00:1", true}, {"::ffff:0:808:808", true}, // IPv4-translated (SIIT)
		{"64:ff9b::7f00:1", true}, {"64:ff9b::127.0.0.1", true}, {"64:ff9b::a00:1", true}, {"64:ff9b::c000:201", true},
		{"64:ff9b:1::1", true}, {"64:ff9b:1:7f00:1::", true}, // local-use NAT64
		{"100::1", true},                                 // discard-only
		{"2001::1", true}, {"2001:0:4136:e378::1", true}, // Teredo
		{"2001:2::1", true}, {"2001:10::1", true}, {"2001:1ff::1", true}, // IETF protocol assignments
		{"2001:db8::1", true}, {"3fff::1", true}, // documentation
		{"2002:7f00:1::1", true}, {"2002:808:808::1", true}, // 6to4
		{"fc00::1", true}, {"fd00::1", true}, {"fe80::1", true}, {"fec0::1", true}, {"ff02::1", true}, {"ff0e::1", true},
		{"4000::1", true}, {"5f00::1", true}, {"1::1", true}, // outside the global unicast space 2000::/3
		{"2606:4700:4700::1111", false}, {"2001:4860:4860::8888", false}, {"2001:200::1", false},
		{"::ffff:8.8.8.8", false}, {"64:ff9b::808:808", false}, {"64:ff9b::8.8.8.8", false},
	} {
		for _, policy := range []Policy{{AllowAll: true}, {Hosts: []string{tc.host}}} {
			_, err := policy.check(context.Background(), tc.host, "443")
			if refused := errors.Is(err, ErrDenied); refused != tc.refused {
				t.Errorf("%s (%+v): err = %v, refused %v, want %v", tc.host, policy, err, refused, tc.refused)
			}
		}
	}
	// IPv4 spellings that are no IP literal are names: whatever resolves them, loopback is not reached.
	for _, host := range []string{"127.1", "0x7f.0.0.1", "0177.0.0.1", "2130706433", "0x7f000001", "0", "localhost"} {
		if ips, err := (Policy{AllowAll: true}).check(context.Background(), host, "80"); err == nil {
			t.Errorf("%s: allowed, to %v", host, ips)
		}
	}
}

// The host's own networks are refused, not only its interfaces' addresses: the whole subnet of every interface
// (its neighbours, its gateway) and every gateway of its routing table, whatever range they are in.
func TestHostNetworksRefused(t *testing.T) {
	t.Parallel()
	ifaces, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	tried := 0
	for _, a := range ifaces {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		addr, _ := netip.AddrFromSlice(ipn.IP)
		addr = addr.Unmap()
		ones, bits := ipn.Mask.Size()
		if addr.Is4() && bits == 128 {
			ones -= 96
		}
		pfx := netip.PrefixFrom(addr, ones).Masked()
		if !pfx.IsValid() {
			t.Fatalf("interface address %v: no prefix", ipn)
		}
		for _, n := range []netip.Addr{pfx.Addr().Next(), addr.Next(), addr.Prev()} {
			if !n.IsValid() || !pfx.Contains(n) || n == addr {
				continue
			}
			tried++
			if _, err := (Policy{AllowAll: true}).check(context.Background(), n.String(), "22"); !errors.Is(err, ErrDenied) {
				t.Errorf("%s, on the subnet %s of the host's address %s: err = %v, want denied", n, pfx, addr, err)
			}
		}
	}
	if tried == 0 {
		t.Fatal("no interface has a subnet with a neighbour address")
	}
}

// A public address is refused when it is on one of the host's networks, also through an IPv6 form that reaches
// it; a neighbouring public network is not.
func TestDeniedOnHostNetworks(t *testing.T) {
	t.Parallel()
	host := prefixes("8.8.8.0/24", "9.9.9.9/32", "2606:4700::/32")
	for _, tc := range []struct {
		addr   string
		denied bool
	}{
		{"8.8.8.9", true}, {"8.8.8.255", true}, {"::ffff:8.8.8.9", true}, {"64:ff9b::808:809", true},
		{"9.9.9.9", true}, {"2606:4700::1", true}, {"2606:4700:ffff::1", true},
		{"8.8.9.1", false}, {"9.9.9.10", false}, {"2606:4701::1", false}, {"64:ff9b::808:901", false},
	} {
		a := netip.MustParseAddr(tc.addr)
		if got := denied(a, host); got != tc.denied {
			t.Errorf("%s on %v: denied %v, want %v", a, host, got, tc.denied)
		}
		if denied(a, nil) {
			t.Errorf("%s with no host networks: denied", a)
		}
	}
}

func TestParseRoutes(t *testing.T) {
	t.Parallel()
	v4 := "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n" +
		"eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n" +
		"eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n" +
		"eth1\t0000000A\t0908080A\t0003\t0\t0\t0\t0000FFFF\t0\t0\t0\n"
	gws, err := parseRoute4([]byte(v4))
	// The kernel prints the address (network order in memory) as a native integer.
	var want []netip.Addr
	for _, be := range [][4]byte{{0x01, 0x02, 0x00, 0xc0}, {0x09, 0x08, 0x08, 0x0a}} {
		var a [4]byte
		binary.NativeEndian.PutUint32(a[:], binary.BigEndian.Uint32(be[:]))
		want = append(want, netip.AddrFrom4(a))
	}
	if err != nil || !slices.Equal(gws, want) {
		t.Errorf("IPv4 gateways: %v, %v; want %v", gws, err, want)
	}
	if binary.NativeEndian.Uint16([]byte{1, 0}) == 1 && (len(gws) != 2 || gws[0].String() != "192.0.2.1" || gws[1].String() != "10.8.8.9") {
		t.Errorf("IPv4 gateways on a little-endian host: %v, want 192.0.2.1 and 10.8.8.9", gws)
	}
	v6 := "fd000000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n" +
		"00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd000000000000000000000000000001 00000400 00000002 00000000 00000003     eth0\n" +
		"00000000000000000000000000000000 00 00000000000000000000000000000000 00 26064700000000000000000000000001 00000400 00000002 00000000 00000003     eth1\n"
	gws, err = parseRoute6([]byte(v6))
	if err != nil || len(gws) != 2 || gws[0].String() != "fd00::1" || gws[1].String() != "2606:4700::1" {
		t.Errorf("IPv6 gateways: %v, %v", gws, err)
	}
	for _, bad := range []string{"Iface\tDestination\tGateway\neth0\t00000000\tzz\n", "Iface\neth0\n"} {
		if _, err := parseRoute4([]byte(bad)); err == nil {
			t.Errorf("parseRoute4(%q): no error", bad)
		}
	}
	if _, err := parseRoute6([]byte("00 00 00 00 0123\n")); err == nil {
		t.Error("parseRoute6 of a short next hop: no error")
	}
}

// Every gateway of the host's routing tables is refused, and the host's networks include each of them and each
// interface's subnet.
func TestGatewaysRefused(t *testing.T) {
	t.Parallel()
	gws, err := gateways()
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(routeFile4); err == nil && len(gws) == 0 {
		for _, line := range strings.Split(string(b), "\n")[1:] {
			if f := strings.Fields(line); len(f) > 2 && f[2] != "00000000" {
				t.Fatalf("no gateway found in a routing table with a gateway route:\n%s", b)
			}
		}
	}
	nets, err := hostNets()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gws {
		if !inAny(g, nets) {
			t.Errorf("gateway %s not among the host's networks %v", g, nets)
		}
		if _, err := (Policy{AllowAll: true}).check(context.Background(), g.String(), "80"); !errors.Is(err, ErrDenied) {
			t.Errorf("gateway %s: err = %v, want denied", g, err)
		}
	}
}

// An AllowInternal pair trusts its IP literal in every spelling, and nothing else.
func TestTrustedSpellings(t *testing.T) {
	t.Parallel()
	p := Policy{AllowAll: true, AllowInternal: []string{"[::1]:8443", "127.0.0.1:8443"}}
	for _, host := range []string{"::1", "0:0::1", "0:0:0:0:0:0:0:1", "127.0.0.1", "::ffff:127.0.0.1"} {
		if _, err := p.check(context.Background(), host, "8443"); err != nil {
			t.Errorf("%s:8443: %v", host, err)
		}
	}
	for _, host := range []string{"::2", "127.0.0.2", "::127.0.0.1", "::ffff:0:7f00:1"} {
		if _, err := p.check(context.Background(), host, "8443"); !errors.Is(err, ErrDenied) {
			t.Errorf("%s:8443: err = %v, want denied", host, err)
		}
	}
}

// A name is resolved once per connection, and the connection goes to the address checked, not to a second
// answer of the DNS (rebinding between the check and the dial).
func TestDialsCheckedAddress(t *testing.T) {
	t.Parallel()
	first, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	_, port, _ := net.SplitHostPort(first.Addr().String())
	second, err := net.Listen("tcp", "127.0.0.2:"+port)
	if err != nil {
		t.Fatalf("a second loopback address: %v", err)
	}
	defer second.Close()
	for _, ln := range []net.Listener{first, second} {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_, _ = c.Write([]byte(ln.Addr().String()))
				c.Close()
			}
		}()
	}
	var lookups atomic.Int32
	policy := Policy{AllowAll: true, AllowInternal: []string{"rebind.test:" + port},
		lookup: func(context.Context, string) ([]netip.Addr, error) {
			if lookups.Add(1) == 1 {
				return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
			}
			return []netip.Addr{netip.MustParseAddr("127.0.0.2")}, nil
		}}
	sock := filepath.Join(t.TempDir(), "proxy.sock")
	p, err := Listen(Config{Path: sock, UID: -1, GID: -1, Policy: policy})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT rebind.test:%s HTTP/1.1\r\nHost: rebind.test:%[1]s\r\n\r\n", port)
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, _ := io.ReadAll(br)
	if string(got) != first.Addr().String() || lookups.Load() != 1 {
		t.Errorf("reached %q after %d lookups, want %s after one", got, lookups.Load(), first.Addr())
	}
}
