package egress

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"strings"
)

// Which addresses a sandbox may reach: only global unicast ones. Everything in the IANA IPv4 and IPv6
// special-purpose address registries that is not globally reachable is refused, and so is every address of the
// host's own networks (its interfaces' subnets and its gateways), whatever range they are in. An IPv6 address
// that designates an IPv4 one (IPv4-mapped, NAT64) is judged by the IPv4 address it reaches.

// special4 are the IPv4 ranges that are not global unicast (RFC 6890 and the IANA IPv4 special-purpose
// registry, multicast and the reserved class E).
var special4 = prefixes(
	"0.0.0.0/8",          // "this network" (Linux connects 0.0.0.0 to the host itself)
	"10.0.0.0/8",         // private
	"100.64.0.0/10",      // shared address space (CGNAT, overlay networks such as Tailscale)
	"127.0.0.0/8",        // loopback
	"169.254.0.0/16",     // link-local (cloud metadata services)
	"172.16.0.0/12",      // private
	"192.0.0.0/24",       // IETF protocol assignments (a few globally reachable /32s refused with them)
	"192.0.2.0/24",       // documentation (TEST-NET-1)
	"192.88.99.0/24",     // 6to4 relay anycast (deprecated)
	"192.168.0.0/16",     // private
	"198.18.0.0/15",      // benchmarking
	"198.51.100.0/24",    // documentation (TEST-NET-2)
	"203.0.113.0/24",     // documentation (TEST-NET-3)
	"224.0.0.0/4",        // multicast
	"240.0.0.0/4",        // reserved
	"255.255.255.255/32", // limited broadcast (inside 240/4 too)
)

// global6 is the IPv6 global unicast space (RFC 4291, RFC 3587): every address outside it is refused, which
// covers ::/128, ::1, the IPv4-compatible ::a.b.c.d, IPv4-translated ::ffff:0:a.b.c.d, 100::/64 (discard),
// fc00::/7 (unique local), fe80::/10 (link-local), fec0::/10 (site-local), ff00::/8 (multicast) and the
// unallocated rest. IPv4-mapped and NAT64 addresses are judged by their IPv4 address before this.
var global6 = netip.MustParsePrefix("2000::/3")

// special6 are the ranges inside global6 that are not global unicast (the IANA IPv6 special-purpose registry).
var special6 = prefixes(
	"2001::/23",     // IETF protocol assignments: Teredo, benchmarking, ORCHID, ... (the few globally reachable sub-blocks refused with them)
	"2001:db8::/32", // documentation
	"2002::/16",     // 6to4 (deprecated): refused whatever IPv4 address it embeds
	"3fff::/20",     // documentation (RFC 9637)
)

// nat64 is the well-known NAT64 prefix (RFC 6052): 64:ff9b::a.b.c.d reaches a.b.c.d through the network's
// translator. The local-use prefix 64:ff9b:1::/48 (RFC 8215) is outside global6 and refused.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

func prefixes(cidrs ...string) []netip.Prefix {
	ps := make([]netip.Prefix, len(cidrs))
	for i, c := range cidrs {
		ps[i] = netip.MustParsePrefix(c)
	}
	return ps
}

// reaches returns the address a connection to a actually goes to: the IPv4 address an IPv4-mapped or NAT64
// address designates, else a itself.
func reaches(a netip.Addr) netip.Addr {
	switch {
	case a.Is4In6():
		return a.Unmap()
	case nat64.Contains(a):
		b := a.As16()
		return netip.AddrFrom4([4]byte(b[12:]))
	}
	return a
}

// internal reports whether a is not a global unicast address: loopback, private, link-local, unspecified,
// multicast, broadcast, documentation, benchmarking, reserved, or an IPv6 form that embeds one of those.
func internal(a netip.Addr) bool {
	if !a.IsValid() || a.Zone() != "" { // a zone scopes the address to a link
		return true
	}
	a = reaches(a)
	if a.Is4() {
		return inAny(a, special4)
	}
	return !global6.Contains(a) || inAny(a, special6)
}

func inAny(a netip.Addr, ps []netip.Prefix) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// denied reports whether a connection to a is refused: a is internal, or on one of the host's networks.
func denied(a netip.Addr, host []netip.Prefix) bool {
	return internal(a) || inAny(a.WithZone(""), host) || inAny(reaches(a.WithZone("")), host)
}

// hostNets returns the host's own networks: the whole subnet of each interface address and each gateway of its
// routing tables (as a single address; it is usually inside a subnet, not always). Through any of them a
// sandbox would reach the server's host or its neighbours, in whatever range they are.
func hostNets() ([]netip.Prefix, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("the host's interface addresses: %w", err)
	}
	var nets []netip.Prefix
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(ipn.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		ones, bits := ipn.Mask.Size()
		if ip.Is4() && bits == 128 {
			ones -= 96
		}
		p := netip.PrefixFrom(ip, ones)
		if bits == 0 || !p.IsValid() { // no canonical mask: the address alone
			p = netip.PrefixFrom(ip, ip.BitLen())
		}
		nets = append(nets, p.Masked())
	}
	gws, err := gateways()
	if err != nil {
		return nil, err
	}
	for _, g := range gws {
		nets = append(nets, netip.PrefixFrom(g, g.BitLen()))
	}
	return nets, nil
}

// Routing tables of Linux; elsewhere they do not exist and gateways returns none.
const (
	routeFile4 = "/proc/net/route"
	routeFile6 = "/proc/net/ipv6_route"
)

// gateways returns the gateways of the host's IPv4 and IPv6 routing tables.
func gateways() ([]netip.Addr, error) {
	var gws []netip.Addr
	for _, f := range []struct {
		path  string
		parse func([]byte) ([]netip.Addr, error)
	}{{routeFile4, parseRoute4}, {routeFile6, parseRoute6}} {
		b, err := os.ReadFile(f.path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("the host's routes: %w", err)
		}
		g, err := f.parse(b)
		if err != nil {
			return nil, fmt.Errorf("the host's routes: %s: %w", f.path, err)
		}
		gws = append(gws, g...)
	}
	return gws, nil
}

// parseRoute4 returns the gateways of /proc/net/route: its third column, a 32-bit hexadecimal number printed
// from the address in network order as the kernel's native integer.
func parseRoute4(b []byte) ([]netip.Addr, error) {
	var gws []netip.Addr
	sc := bufio.NewScanner(bytes.NewReader(b))
	for first := true; sc.Scan(); first = false {
		f := strings.Fields(sc.Text())
		if first || len(f) == 0 {
			continue // the header
		}
		if len(f) < 3 {
			return nil, fmt.Errorf("short line %q", sc.Text())
		}
		raw, err := hex.DecodeString(f[2])
		if err != nil || len(raw) != 4 {
			return nil, fmt.Errorf("gateway %q", f[2])
		}
		var a [4]byte
		binary.NativeEndian.PutUint32(a[:], binary.BigEndian.Uint32(raw))
		if g := netip.AddrFrom4(a); !g.IsUnspecified() {
			gws = append(gws, g)
		}
	}
	return gws, sc.Err()
}

// parseRoute6 returns the gateways of /proc/net/ipv6_route: its fifth column, the next hop in 32 hexadecimal
// digits in network order.
func parseRoute6(b []byte) ([]netip.Addr, error) {
	var gws []netip.Addr
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) < 5 {
			return nil, fmt.Errorf("short line %q", sc.Text())
		}
		raw, err := hex.DecodeString(f[4])
		if err != nil || len(raw) != 16 {
			return nil, fmt.Errorf("next hop %q", f[4])
		}
		if g := netip.AddrFrom16([16]byte(raw)); !g.IsUnspecified() {
			gws = append(gws, g)
		}
	}
	return gws, sc.Err()
}
