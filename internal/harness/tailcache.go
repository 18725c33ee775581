package harness

import (
	"container/list"
	"slices"
	"sync"

	"github.com/corralhq/corral/internal/apitype"
)

// A brain keeps the tails of the long sessions it worked last, so that its next claim of one reads only what
// was appended since (refresh) instead of the whole log back to the last compaction: at 10,000 events that read
// was most of a turn's overhead (docs/benchmarks.md, "A session's history").
//
// A kept tail is exact, not a guess, because of what the log guarantees: it is append-only, and the only change to
// a stored event is processed_at, set once on a client event by the brain holding the lease. So a tail is kept only
// if the run that read it ended by releasing its lease and every event in it is final (processed_at set): what
// any brain appended after it, its next claim reads. The one append that changes what came before is a
// compaction (its summary replaces the events it covers): a kept tail whose refresh reads one is dropped and the
// tail read again from the log. Any brain can still resume any session; a brain that never worked it reads its
// tail as before.
//
// A tail that carries URLs its compactions replaced (for web_fetch) is not kept either: a tail read from the log
// has none (the summary gives none), and a kept tail must answer as a read one would.
//
// Only a tail longer than one page of the log is kept (a shorter one is read in one query anyway), so an idle
// session's cost in memory stays nil; the kept tails are bounded in bytes, the least recently kept dropped
// first.

// tailKey names a thread's tail: a session and a thread of it ("" the primary).
type tailKey struct{ session, thread string }

// tailCache is the brain's kept tails (Config.TailCacheBytes). A tail is taken out of it by the run that uses it,
// so a tail is only ever used by one run at a time.
type tailCache struct {
	max int64 // bytes; <= 0 keeps nothing

	mu    sync.Mutex
	size  int64
	order list.List // of *keptTail, the most recently kept first
	byKey map[tailKey]*list.Element
}

type keptTail struct {
	key  tailKey
	tail *tail
	size int64
}

func newTailCache(maxBytes int64) *tailCache {
	return &tailCache{max: maxBytes, byKey: map[tailKey]*list.Element{}}
}

// take removes k's tail from the cache and returns it (nil if none is kept).
func (c *tailCache) take(k tailKey) *tail {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el := c.byKey[k]
	if el == nil {
		return nil
	}
	c.remove(el)
	return el.Value.(*keptTail).tail
}

// keep keeps t as k's tail if it is worth keeping and may be kept (see above), dropping the least recently kept
// tails past the cache's bound.
func (c *tailCache) keep(k tailKey, t *tail) {
	if c == nil || c.max <= 0 || t == nil || len(t.events) <= eventPage || slices.ContainsFunc(t.events, pending) || len(t.carriedURLs) > 0 {
		return
	}
	size := tailSize(t)
	if size > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el := c.byKey[k]; el != nil {
		c.remove(el)
	}
	c.byKey[k] = c.order.PushFront(&keptTail{key: k, tail: t, size: size})
	c.size += size
	for c.size > c.max {
		c.remove(c.order.Back())
	}
}

func (c *tailCache) remove(el *list.Element) {
	kt := c.order.Remove(el).(*keptTail)
	delete(c.byKey, kt.key)
	c.size -= kt.size
}

// len reports how many tails are kept, and their size in bytes.
func (c *tailCache) len() (int, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byKey), c.size
}

// pending reports whether e may still change in the log: a client event no brain has processed yet.
func pending(e apitype.Event) bool { return e.ProcessedAt == nil }

// eventOverhead is about what an event costs in memory beyond its strings and data: the struct, its
// processed_at and the slice's slot.
const eventOverhead = 200

// tailSize is about how many bytes t holds: its events' slots up to the slice's capacity, and their strings and
// data (a compaction clears the slots past the events it keeps).
func tailSize(t *tail) int64 {
	n := int64(len(t.summary) + eventOverhead*(cap(t.events)+len(t.priorOutcome)))
	for _, evs := range [][]apitype.Event{t.events, t.priorOutcome} {
		for _, e := range evs {
			n += int64(len(e.ID) + len(e.Type) + len(e.SessionID) + len(e.Thread) + len(e.Data))
		}
	}
	return n
}
