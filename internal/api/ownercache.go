package api

import (
	"cmp"
	"strings"
	"sync"

	"github.com/corralhq/corral/internal/apitype"
)

// ownerCache keeps recorded owners, which never change, so that a request's path costs no read once its
// resources were seen. It holds at most max ids (maxOwnersCached), and forgets them all when full; an id longer
// than maxOwnerIDLen is not kept (no id Corral makes is that long), so what a client's paths can make it hold is
// bounded in bytes as well as in ids.
//
// It holds an entry for nearly every session a server has seen, so an entry is kept small: an id of
// apitype.NewID's shape (a prefix, "011C", 24 base58 characters) as a packedID, and the workspace as an index
// into the workspaces seen. Such an entry costs about 30 bytes of map, where the id and workspace strings cost
// over 100: most of an idle session's memory (issue 30). Other ids are kept as strings.
type ownerCache struct {
	mu  sync.Mutex
	max int // 0 is maxOwnersCached
	t   ownerTable
}

// ownerTable is an ownerCache's content since its last reset.
type ownerTable struct {
	packed     map[packedID]uint32
	other      map[string]uint32
	workspaces []string // by index
	wsIndex    map[string]uint32
	prefixes   map[string]byte // the id prefixes seen, each with its index in a packedID
}

const (
	maxOwnersCached = 1 << 16
	maxOwnerIDLen   = 128
)

func (c *ownerCache) get(id string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var (
		i  uint32
		ok bool
	)
	if k, packed := c.t.pack(id, false); packed {
		i, ok = c.t.packed[k]
	} else {
		i, ok = c.t.other[id]
	}
	if !ok {
		return "", false
	}
	return c.t.workspaces[i], true
}

func (c *ownerCache) put(id, ws string) {
	if len(id) > maxOwnerIDLen {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.t.packed == nil || c.len() >= cmp.Or(c.max, maxOwnersCached) {
		c.t = ownerTable{
			packed: make(map[packedID]uint32), other: make(map[string]uint32),
			wsIndex: make(map[string]uint32), prefixes: make(map[string]byte),
		}
	}
	i, ok := c.t.wsIndex[ws]
	if !ok {
		ws = strings.Clone(ws)
		i = uint32(len(c.t.workspaces))
		c.t.workspaces = append(c.t.workspaces, ws)
		c.t.wsIndex[ws] = i
	}
	if k, packed := c.t.pack(id, true); packed {
		c.t.packed[k] = i
	} else {
		c.t.other[strings.Clone(id)] = i // a copy: id may be part of a request's whole path
	}
}

// len is how many ids c holds.
func (c *ownerCache) len() int { return len(c.t.packed) + len(c.t.other) }

// packedID is an id of apitype.NewID's shape, packed: its prefix's index in the table's prefixes, then its 24
// base58 characters at 6 bits each. Two ids have the same packedID only if they are the same id.
type packedID [19]byte

// base58Value maps a byte to its base58 digit plus one (0 for a byte that is not one).
var base58Value = func() (v [256]byte) {
	for i, c := range []byte(apitype.Base58) {
		v[c] = byte(i + 1)
	}
	return v
}()

// pack packs id if it has NewID's shape and its prefix has an index (given one, if add, while fewer than 256
// prefixes have).
func (t *ownerTable) pack(id string, add bool) (packedID, bool) {
	var k packedID
	n := len(id) - len("011C") - 24
	if n < 1 || id[n:n+4] != "011C" {
		return k, false
	}
	var bits uint32
	nbits, out := 0, 1
	for i := n + 4; i < len(id); i++ {
		d := base58Value[id[i]]
		if d == 0 {
			return k, false
		}
		bits = bits<<6 | uint32(d-1)
		if nbits += 6; nbits >= 8 {
			nbits -= 8
			k[out] = byte(bits >> nbits)
			out++
		}
	}
	p, ok := t.prefixes[id[:n]]
	if !ok {
		if !add || len(t.prefixes) == 256 {
			return k, false
		}
		p = byte(len(t.prefixes))
		t.prefixes[strings.Clone(id[:n])] = p
	}
	k[0] = p
	return k, true
}
