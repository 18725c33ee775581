// Package tunnel carries MCP traffic to servers inside a user's network (MCP tunnels, beta
// mcp-tunnels-2026-06-22), with nothing listening on the user's side.
//
// The connector (Connector, `corral tunnel`) runs inside that network. It dials out to Corral with the tunnel's
// token (an HTTP/1.1 upgrade to ConnectPath), and the connection becomes a yamux session over which Corral opens
// one stream per TCP connection the MCP proxy wants. A stream starts with an open line naming the host and port
// the MCP URL named; the connector looks the host up in its routes (the servers it names, nothing else), dials
// that server, answers with an accept line and then carries bytes both ways. TLS runs end to end, from the MCP
// proxy to the private MCP server, and is verified against the tunnel's CA certificates: the connector carries
// only ciphertext, and the vault's credentials the MCP proxy adds never reach it in the clear.
//
// The Hub is Corral's side: it authenticates connectors (Handler), keeps their sessions, resolves an MCP URL's
// host to its tunnel (Resolve) and dials through a connector (Route.DialTLS). A connector authenticated with a
// token that was since rotated, or whose tunnel was archived, is dropped: at once in the process that did it
// (Revoke), at the next use or the next check everywhere else.
package tunnel

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"time"

	"github.com/hashicorp/yamux"
)

// Protocol of the connection between a connector and Corral.
const (
	// ConnectPath is the path a connector dials (GET, upgraded).
	ConnectPath = "/v1/tunnel_connector"
	// Upgrade is the protocol the connection is upgraded to.
	Upgrade = "corral-tunnel/1"
	// HeaderTunnelID and HeaderTunnelDomain name, in the 101 answer, the tunnel the token authenticated.
	HeaderTunnelID     = "Corral-Tunnel-Id"
	HeaderTunnelDomain = "Corral-Tunnel-Domain"
)

// maxLine bounds an open or accept line.
const maxLine = 1024

// openLine is the first line Corral writes on a stream: where the MCP URL pointed.
type openLine struct {
	Host string `json:"host"`
	Port string `json:"port"`
}

// acceptLine is the connector's answer: Error empty when it dialed the route, else why not.
type acceptLine struct {
	Error string `json:"error,omitempty"`
}

func writeLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// readLine reads one JSON line of at most maxLine bytes from r, byte by byte: nothing after the line is consumed,
// so the stream's bytes that follow stay in r.
func readLine(r io.Reader, v any) error {
	var b []byte
	var one [1]byte
	for {
		if _, err := io.ReadFull(r, one[:]); err != nil {
			return err
		}
		if one[0] == '\n' {
			break
		}
		if b = append(b, one[0]); len(b) > maxLine {
			return errors.New("tunnel: line too long")
		}
	}
	return json.Unmarshal(b, v)
}

// muxConfig is the yamux configuration of both sides: keep-alives find a dead peer within a minute; what the
// peer may have in flight is bounded (accept backlog, a window per stream), and nothing is logged to stderr.
func muxConfig(backlog int) *yamux.Config {
	c := yamux.DefaultConfig()
	c.AcceptBacklog = backlog
	c.KeepAliveInterval = 15 * time.Second
	c.ConnectionWriteTimeout = 15 * time.Second
	c.StreamOpenTimeout = 15 * time.Second
	c.StreamCloseTimeout = time.Minute
	c.LogOutput = io.Discard
	return c
}

// maxPings bounds the pings a peer sends per pingWindow: its keep-alives send one each KeepAliveInterval.
const (
	maxPings   = 16
	pingWindow = 15 * time.Second
)

// errPingFlood ends a session whose peer sent more than maxPings pings in a pingWindow.
var errPingFlood = errors.New("tunnel: the peer sent too many pings")

// pingGuard is the connection a yamux session reads its peer's frames from, counting its pings on the way: yamux
// answers each ping in a goroutine of its own that waits up to ConnectionWriteTimeout to send the answer, so a
// peer that sent pings and read nothing made its side hold a goroutine per 12-byte frame. Past maxPings in a
// pingWindow, Read fails, which ends the session.
type pingGuard struct {
	io.ReadWriteCloser
	hdr   [12]byte // the frame header being read
	n     int      // its bytes read so far
	skip  uint32   // the bytes of a data frame's payload still to come
	since time.Time
	pings int
}

func (g *pingGuard) Read(p []byte) (int, error) {
	n, err := g.ReadWriteCloser.Read(p)
	for b := p[:n]; len(b) > 0; {
		if g.skip > 0 {
			k := min(uint32(len(b)), g.skip)
			g.skip, b = g.skip-k, b[k:]
			continue
		}
		k := copy(g.hdr[g.n:], b)
		g.n, b = g.n+k, b[k:]
		if g.n < len(g.hdr) {
			break
		}
		g.n = 0
		switch typ, flags := g.hdr[1], binary.BigEndian.Uint16(g.hdr[2:4]); {
		case typ == 0: // data: a payload of the header's length follows
			g.skip = binary.BigEndian.Uint32(g.hdr[8:12])
		case typ == 2 && flags&1 != 0: // a ping (SYN) to answer
			if now := time.Now(); now.Sub(g.since) > pingWindow {
				g.since, g.pings = now, 0
			}
			if g.pings++; g.pings > maxPings {
				return 0, errPingFlood
			}
		}
	}
	return n, err
}

// routeKey is the key a host is looked up under in a connector's routes: the labels in front of the tunnel's
// domain ("wiki" for wiki.<domain>), or "" when host is not below it.
func routeKey(host, domain string) string {
	host, domain = strings.ToLower(strings.TrimSuffix(host, ".")), strings.ToLower(domain)
	key, ok := strings.CutSuffix(host, "."+domain)
	if !ok || key == "" {
		return ""
	}
	return key
}
