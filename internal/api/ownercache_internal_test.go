package api

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/apitype"
)

func TestOwnerCache(t *testing.T) {
	var c ownerCache
	if _, ok := c.get("sesn_011Cx"); ok {
		t.Fatal("an empty cache found an id")
	}
	s1, s2 := apitype.NewID(apitype.PrefixSession), apitype.NewID(apitype.PrefixSession)
	agent := apitype.NewID(apitype.PrefixAgent)
	// The same random part under another prefix is another id.
	sameTail := apitype.PrefixAgent + s1[len(apitype.PrefixSession):]
	// Ids that differ only in their last character, or only in the case of one character.
	near := s1[:len(s1)-1] + string(apitype.Base58[(strings.IndexByte(apitype.Base58, s1[len(s1)-1])+1)%58])
	caseOf := "sesn_011CaaaaaaaaaaaaaaaaaaaaaaaA"
	caseOf2 := "sesn_011CaaaaaaaaaaaaaaaaaaaaaaaB"
	// A derived id of the shape, under a prefix of its own.
	derived := "run-" + s2
	// Not of NewID's shape: kept as strings.
	odd := []string{"sesn_x", "sesn_011C" + strings.Repeat("0", 24), "011C" + strings.Repeat("a", 24), s2 + "x"}
	owners := map[string]string{
		s1: "wrkspc_a", s2: "wrkspc_b", agent: "wrkspc_a", sameTail: "wrkspc_c", near: "wrkspc_b",
		caseOf: "wrkspc_a", caseOf2: "wrkspc_b", derived: "wrkspc_c", odd[0]: "wrkspc_a", odd[1]: "wrkspc_b", odd[2]: "wrkspc_c",
		odd[3]: "wrkspc_d",
	}
	for id, ws := range owners {
		c.put(id, ws)
	}
	for id, ws := range owners {
		if got, ok := c.get(id); !ok || got != ws {
			t.Errorf("get(%q) = %q, %v; want %q", id, got, ok, ws)
		}
	}
	if got, want := len(c.t.packed), 8; got != want {
		t.Errorf("%d ids packed, want %d", got, want)
	}
	if got, want := len(c.t.workspaces), 4; got != want {
		t.Errorf("%d workspaces, want %d", got, want)
	}
	for _, id := range []string{apitype.NewID(apitype.PrefixSession), "sesn_011Caaaaaaaaaaaaaaaaaaaaaaaa", "other"} {
		if ws, ok := c.get(id); ok {
			t.Errorf("get(%q) found %q, never put", id, ws)
		}
	}
	long := apitype.PrefixSession + strings.Repeat("x", maxOwnerIDLen)
	c.put(long, "wrkspc_a")
	if _, ok := c.get(long); ok {
		t.Error("an id longer than maxOwnerIDLen was kept")
	}
}

// TestOwnerCacheBound: the cache forgets everything when full, and whatever ids a client's paths name it holds
// at most max of them, each bounded in length, and at most 256 prefixes.
func TestOwnerCacheBound(t *testing.T) {
	c := ownerCache{max: 1000}
	first := apitype.NewID(apitype.PrefixSession)
	c.put(first, "wrkspc_a")
	for i := range 999 {
		c.put(fmt.Sprintf("p%d_011C%s", i, strings.Repeat("z", 24)), "wrkspc_a")
	}
	if got := c.len(); got != 1000 {
		t.Fatalf("holds %d ids, want 1000", got)
	}
	if got, want := len(c.t.prefixes), 256; got != want {
		t.Errorf("%d prefixes, want %d (the most a packedID indexes)", got, want)
	}
	if _, ok := c.get("p998_011C" + strings.Repeat("z", 24)); !ok {
		t.Error("an id past the 256th prefix was not kept as a string")
	}
	c.put(apitype.NewID(apitype.PrefixSession), "wrkspc_b")
	if got := c.len(); got != 1 {
		t.Errorf("holds %d ids after the put past max, want 1", got)
	}
	if _, ok := c.get(first); ok {
		t.Error("the first id was kept past the reset")
	}
}

// TestOwnerCacheBytes: an entry for an id of NewID's shape costs tens of bytes, not the id's string (the idle
// session's memory, issue 30).
func TestOwnerCacheBytes(t *testing.T) {
	const n = 50_000
	var c ownerCache
	c.put(apitype.NewID(apitype.PrefixAgent), "wrkspc_a")
	before := heapLive()
	for range n {
		// As a request's path holds an id: part of a longer string, which the cache must not keep.
		path := "/v1/sessions/" + apitype.NewID(apitype.PrefixSession) + "/events"
		c.put(path[len("/v1/sessions/"):len(path)-len("/events")], "wrkspc_a")
	}
	perEntry := float64(heapLive()-before) / n
	t.Logf("%.1f bytes per entry", perEntry)
	if perEntry > 48 {
		t.Errorf("%.1f bytes per entry, want at most 48", perEntry)
	}
	if c.len() != n+1 {
		t.Errorf("holds %d ids, want %d", c.len(), n+1)
	}
}

func heapLive() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
