package harness

import (
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
)

// longTail is a tail of n final events, each with data of size bytes.
func longTail(n, size int) *tail {
	at := time.Now()
	tl := &tail{}
	for i := range n {
		tl.events = append(tl.events, apitype.Event{ID: "sevt_x", Type: apitype.EventAgentMessage, Seq: int64(i + 1), ProcessedAt: &at,
			Data: make([]byte, size)})
	}
	tl.lastSeq = int64(n)
	return tl
}

func TestTailCacheKeeps(t *testing.T) {
	a := tailKey{"sesn_a", ""}

	c := newTailCache(1 << 20)
	short := longTail(eventPage, 10)
	c.keep(a, short)
	if c.take(a) != nil {
		t.Error("a tail of one page was kept")
	}
	pendingTail := longTail(eventPage+1, 10)
	pendingTail.events[3].ProcessedAt = nil
	c.keep(a, pendingTail)
	if c.take(a) != nil {
		t.Error("a tail with an event not yet processed was kept")
	}
	c.keep(a, longTail(eventPage+1, 10))
	if n, size := c.len(); n != 1 || size <= 0 {
		t.Errorf("after one keep: %d tails, %d bytes", n, size)
	}
	if c.take(a) == nil || c.take(a) != nil {
		t.Error("a kept tail is taken once")
	}
	if n, size := c.len(); n != 0 || size != 0 {
		t.Errorf("after the take: %d tails, %d bytes", n, size)
	}

	none := newTailCache(-1)
	none.keep(a, longTail(eventPage+1, 10))
	if none.take(a) != nil {
		t.Error("a cache bounded at -1 kept a tail")
	}
}

func TestTailCacheBound(t *testing.T) {
	one := tailSize(longTail(eventPage+1, 1000))
	c := newTailCache(2*one + one/2) // room for two
	keys := []tailKey{{"sesn_1", ""}, {"sesn_2", ""}, {"sesn_3", ""}}
	for _, k := range keys {
		c.keep(k, longTail(eventPage+1, 1000))
	}
	if n, size := c.len(); n != 2 || size != 2*one {
		t.Errorf("%d tails, %d bytes; want 2, %d", n, size, 2*one)
	}
	if c.take(keys[0]) != nil {
		t.Error("the least recently kept tail was not the one dropped")
	}
	if c.take(keys[1]) == nil || c.take(keys[2]) == nil {
		t.Error("a recent tail was dropped")
	}
	// Keeping a key again replaces its tail and counts its size once.
	c.keep(keys[0], longTail(eventPage+1, 1000))
	c.keep(keys[0], longTail(eventPage+1, 1000))
	if n, size := c.len(); n != 1 || size != one {
		t.Errorf("a key kept twice: %d tails, %d bytes", n, size)
	}
	// A tail larger than the whole bound is not kept, and drops nothing.
	c.keep(keys[1], longTail(3*eventPage, 1000))
	if n, _ := c.len(); n != 1 || c.take(keys[1]) != nil {
		t.Error("a tail larger than the bound was kept")
	}
}
