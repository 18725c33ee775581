package apitype

import (
	"crypto/rand"
	"strings"
	"time"
)

// ID prefixes, as the hosted service uses them.
const (
	PrefixAgent       = "agent_"
	PrefixEnvironment = "env_"
	PrefixSession     = "sesn_"
	PrefixResource    = "sesrsc_"
	PrefixEvent       = "sevt_"
	PrefixAPIKey      = "apikey_"
	PrefixRequest     = "req_"
	PrefixFile        = "file_"
	PrefixSkill       = "skill_"
	PrefixThread      = "sthr_"
	PrefixMemoryStore = "memstore_"
	PrefixMemory      = "mem_"
	PrefixMemVersion  = "memver_"
	PrefixDream       = "drm_"
	PrefixTunnel      = "tnl_"
	PrefixTunnelCert  = "tcrt_"
	PrefixTunnelToken = "tnltok_"
)

// Base58 is the alphabet of NewID's random part, in ascending byte order.
const Base58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"

// NewID returns prefix + "011C" + 24 random base58 characters, the shape of the hosted service's identifiers.
func NewID(prefix string) string {
	var b strings.Builder
	b.Grow(len(prefix) + 28)
	b.WriteString(prefix)
	b.WriteString("011C")
	var raw [24]byte
	_, _ = rand.Read(raw[:]) // crypto/rand.Read never fails.
	for _, c := range raw {
		b.WriteByte(Base58[int(c)%len(Base58)])
	}
	return b.String()
}

// HasPrefix reports whether id looks like an identifier of the given prefix.
func HasPrefix(id, prefix string) bool {
	return strings.HasPrefix(id, prefix) && len(id) > len(prefix)
}

// Now is the wall clock truncated to microseconds, the precision every store keeps.
func Now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// TimeFormat is how timestamps are written on the wire.
const TimeFormat = "2006-01-02T15:04:05.999999Z07:00"
