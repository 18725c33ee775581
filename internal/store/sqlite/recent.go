package sqlite

import (
	"slices"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// recentMax is how many of a followed session's newest events stay in memory.
const recentMax = 64

// recent keeps the newest events of the sessions that have subscribers in this process (SSE streams, brains
// watching for interrupts), so that following a session reads what was just appended from memory instead of
// the database: with many streams on a session, every append used to cost one query per stream.
//
// It is exact, not a guess: SQLite serves one process and every write goes through this Store's writer, which
// updates a session's events here after they commit and before anyone is woken, in commit order. So a ring,
// once it holds anything, ends at the session's newest event, and a read after a sequence number the ring
// covers gets exactly what the database would return. A session has a ring only while it has subscribers; an
// idle session holds nothing.
type recent struct {
	mu    sync.Mutex
	rings map[string]*ring
}

// ring is a session's newest events, contiguous by seq (empty until the first append seen since the ring
// was made), and how many subscribers keep it.
type ring struct {
	subscribers int
	events      []apitype.Event
}

func newRecent() *recent { return &recent{rings: map[string]*ring{}} }

// follow keeps the session's ring while the returned function has not been called.
func (c *recent) follow(sessionID string) func() {
	c.mu.Lock()
	r := c.rings[sessionID]
	if r == nil {
		r = &ring{}
		c.rings[sessionID] = r
	}
	r.subscribers++
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if r.subscribers--; r.subscribers == 0 {
				delete(c.rings, sessionID)
			}
		})
	}
}

// appended records committed events of a session. Writer goroutine only, in commit order.
func (c *recent) appended(sessionID string, events []apitype.Event) {
	if len(events) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.rings[sessionID]
	if r == nil {
		return
	}
	if n := len(r.events); n > 0 && r.events[n-1].Seq+1 != events[0].Seq {
		r.events = r.events[:0] // cannot happen while every write goes through the writer; start over
	}
	r.events = append(r.events, events...)
	if extra := len(r.events) - recentMax; extra > 0 {
		r.events = append(r.events[:0:0], r.events[extra:]...)
	}
}

// processed sets processed_at on a session's events in the ring that have none, as the database did.
func (c *recent) processed(sessionID string, seqs []int64, at time.Time) {
	if len(seqs) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.rings[sessionID]
	if r == nil || len(r.events) == 0 {
		return
	}
	first := r.events[0].Seq
	for _, seq := range seqs {
		if i := seq - first; i >= 0 && i < int64(len(r.events)) && r.events[i].ProcessedAt == nil {
			r.events[i].ProcessedAt = &at
		}
	}
}

// forget empties a session's ring (the session was deleted): reads go to the database again.
func (c *recent) forget(sessionID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.rings[sessionID]; r != nil {
		r.events = nil
	}
}

// after returns up to p.Limit events of p's session after p.AfterSeq, oldest first, of p's types if any and in
// its scope, and ending at the event that brings their data to p.MaxBytes if it is > 0
// (see store.EventListParams), when the ring covers every event after p.AfterSeq: ok is false when the
// database must answer. p's other fields are the caller's to rule out.
func (c *recent) after(p *store.EventListParams) (events []apitype.Event, ok bool) {
	seq, types, limit, maxBytes := p.AfterSeq, p.Types, p.Limit, p.MaxBytes
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.rings[p.SessionID]
	if r == nil || len(r.events) == 0 {
		return nil, false
	}
	first, last := r.events[0].Seq, r.events[len(r.events)-1].Seq
	if seq < first-1 || seq > last {
		return nil, false
	}
	size := 0
	for _, e := range r.events[seq+1-first:] {
		if len(events) == limit || maxBytes > 0 && size >= maxBytes {
			break
		}
		if (len(types) == 0 || slices.Contains(types, e.Type)) && inScope(p, &e) {
			events = append(events, e)
			size += len(e.Data)
		}
	}
	return events, true
}
