package harness

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// eventPage is how many events a brain reads from the log at a time.
const eventPage = 200

// loadTail reads the log backwards from its end, a page at a time, down to the last compaction's UpToSeq (or
// the start). It never reads the part a summary replaced. A tail the brain kept from its last run on the thread
// (tailcache.go) is taken up instead, with what was appended since.
func (t *thread) loadTail() error {
	if kept := t.b.tails.take(tailKey{t.sess.ID, t.id}); kept != nil {
		ok, err := t.resumeTail(kept)
		if err != nil {
			return err
		}
		if ok {
			return t.loaded()
		}
	}
	tl := &tail{multi: t.rec != nil}
	var rev []apitype.Event
	stopAt := int64(-1) // once a compaction is found: the last seq its summary covers
	before := int64(0)
walk:
	for {
		page, err := t.b.cfg.Store.EventList(t.ctx, &store.EventListParams{
			SessionID: t.sess.ID, Scope: store.ScopeThread, Thread: t.id, BeforeSeq: before, Desc: true, Limit: eventPage,
		})
		if err != nil {
			return fmt.Errorf("read log: %w", err)
		}
		for _, e := range page {
			if tl.lastSeq == 0 {
				tl.lastSeq = e.Seq
			}
			if stopAt >= 0 && e.Seq <= stopAt {
				break walk
			}
			if stopAt < 0 && e.Type == apitype.EventAgentContextCompacted {
				var c apitype.ContextCompacted
				if err := e.DecodeData(&c); err != nil {
					return err
				}
				tl.summary, tl.upToSeq, stopAt = c.Summary, c.UpToSeq, c.UpToSeq
			}
			rev = append(rev, e)
		}
		if len(page) < eventPage {
			break
		}
		before = page[len(page)-1].Seq
	}
	slices.Reverse(rev)
	tl.events = rev
	if tl.upToSeq > 0 {
		types := []apitype.EventType{apitype.EventSessionStatusRunning, apitype.EventSessionStatusIdle, apitype.EventSessionStatusRescheduled,
			apitype.EventSessionStatusTerminated}
		if tl.multi {
			types = slices.Collect(maps.Keys(threadStatuses))
		}
		last, err := t.b.cfg.Store.EventList(t.ctx, &store.EventListParams{
			SessionID: t.sess.ID, Scope: store.ScopeThread, Thread: t.id, BeforeSeq: tl.upToSeq + 1, Desc: true, Limit: 1, Types: types,
		})
		if err != nil {
			return fmt.Errorf("read log: %w", err)
		}
		if len(last) > 0 {
			tl.priorStatus = tl.statusType(last[0].Type)
		}
	}
	if tl.upToSeq > 0 {
		prior, err := t.b.cfg.Store.EventList(t.ctx, &store.EventListParams{
			SessionID: t.sess.ID, Scope: store.ScopeThread, Thread: t.id, BeforeSeq: tl.upToSeq + 1, Desc: true, Limit: eventPage, Types: outcomeEvents,
		})
		if err != nil {
			return fmt.Errorf("read log: %w", err)
		}
		slices.Reverse(prior)
		tl.priorOutcome = lastOutcome(prior)
	}
	t.tail = tl
	return t.loaded()
}

// resumeTail makes kept the thread's tail and reads what was appended after it. It reports false, and leaves the
// thread without a tail, if what was appended holds a compaction (whose summary replaces events kept holds).
func (t *thread) resumeTail(kept *tail) (bool, error) {
	if kept.multi != (t.rec != nil) {
		return false, nil
	}
	t.tail = kept
	n := len(kept.events)
	if err := t.refresh(); err != nil {
		t.tail = nil
		return false, err
	}
	if slices.ContainsFunc(kept.events[n:], func(e apitype.Event) bool { return e.Type == apitype.EventAgentContextCompacted }) {
		t.tail = nil
		return false, nil
	}
	return true, nil
}

// loaded notes, once the thread's tail is read, whether the claim found the thread's turn in progress.
func (t *thread) loaded() error {
	if st, err := t.derive(); err == nil && st.running() && !t.child() {
		t.tookOver()
	}
	return nil
}

// tookOver records that the claim found a turn in progress, once per run: the active time counts from now, and
// recovered says so in the log.
func (r *run) tookOver() {
	if r.takeover {
		return
	}
	r.activeFrom = time.Now()
	r.takeover = true
	r.b.cfg.Metrics.LeaseTakeover()
}

// isInput reports whether events of type typ are inputs a brain must act on: a client's events, and the
// messages a thread receives from another.
func isInput(typ apitype.EventType) bool {
	return apitype.IsUserEvent(typ) || typ == apitype.EventAgentThreadMessageReceived
}

// threadStatuses maps a thread's own status events to the session status events the steps read and write: in
// a multi-agent session each thread's status is its own, and the session's is their aggregate (threads.go).
var threadStatuses = map[apitype.EventType]apitype.EventType{
	apitype.EventSessionThreadStatusRunning:     apitype.EventSessionStatusRunning,
	apitype.EventSessionThreadStatusIdle:        apitype.EventSessionStatusIdle,
	apitype.EventSessionThreadStatusRescheduled: apitype.EventSessionStatusRescheduled,
	apitype.EventSessionThreadStatusTerminated:  apitype.EventSessionStatusTerminated,
}

// statusType is how the tail's thread reads an event type: in a multi-agent session a thread's own status
// events read as session status events, and the session's aggregate ones (but its termination) as nothing.
func (t *tail) statusType(typ apitype.EventType) apitype.EventType {
	if !t.multi {
		return typ
	}
	if s, ok := threadStatuses[typ]; ok {
		return s
	}
	if isStatusType(typ) && typ != apitype.EventSessionStatusTerminated {
		return ""
	}
	return typ
}

// isStatus reports whether e is a status event of the tail's thread.
func (t *tail) isStatus(e apitype.Event) bool { return isStatusType(t.statusType(e.Type)) }

func isStatusType(typ apitype.EventType) bool {
	switch typ {
	case apitype.EventSessionStatusRunning, apitype.EventSessionStatusIdle, apitype.EventSessionStatusRescheduled,
		apitype.EventSessionStatusTerminated:
		return true
	}
	return false
}

// refresh reads the events appended since the tail's last one.
func (t *thread) refresh() error {
	for {
		page, err := t.b.cfg.Store.EventList(t.ctx, &store.EventListParams{
			SessionID: t.sess.ID, Scope: store.ScopeThread, Thread: t.id, AfterSeq: t.tail.lastSeq, Limit: eventPage,
		})
		if err != nil {
			return fmt.Errorf("read log: %w", err)
		}
		t.tail.events = append(t.tail.events, page...)
		if len(page) > 0 {
			t.tail.lastSeq = page[len(page)-1].Seq
		}
		if len(page) < eventPage {
			return nil
		}
	}
}

// compactTo drops the events a new summary covers.
func (t *tail) compactTo(summary string, upToSeq int64) {
	var dropped, replaced []apitype.Event
	for _, e := range t.events {
		if e.Seq <= upToSeq {
			replaced = append(replaced, e)
			if slices.Contains(outcomeEvents, e.Type) {
				dropped = append(dropped, e)
			}
		}
	}
	t.priorOutcome = lastOutcome(append(slices.Clone(t.priorOutcome), dropped...))
	// The URLs the replaced events gave web_fetch are carried: the summary, which the model wrote, gives none.
	carried := t.carriedURLs
	seen := make(map[sourceURL]bool, len(carried))
	for _, u := range carried {
		seen[u] = true
	}
	for _, u := range sourceURLs(replaced) {
		if len(carried) >= maxCarriedURLs {
			break
		}
		if !seen[u] {
			seen[u] = true
			carried = append(carried, u)
		}
	}
	keep := t.events[:0]
	for _, e := range t.events {
		if e.Seq > upToSeq {
			keep = append(keep, e)
		} else if t.isStatus(e) {
			t.priorStatus = t.statusType(e.Type)
		}
	}
	clear(t.events[len(keep):]) // the replaced events' data is not held past the slice's end
	t.events, t.summary, t.upToSeq, t.carriedURLs = keep, summary, upToSeq, carried
}

// settled reports whether every client event in the tail has been processed: a turn that ends then leaves
// nothing for this run to do, and may release the lease with its last append. A client event the tail lacks
// arrived after the claim, and its wake-up keeps the session runnable past such a release.
func (t *tail) settled() bool {
	for _, e := range t.events {
		if e.ProcessedAt == nil && isInput(e.Type) {
			return false
		}
	}
	return true
}

// setProcessed sets processed_at on the events with the given sequence numbers that have none.
func (t *tail) setProcessed(seqs []int64, at time.Time) {
	for i := range t.events {
		if t.events[i].ProcessedAt == nil && slices.Contains(seqs, t.events[i].Seq) {
			t.events[i].ProcessedAt = &at
		}
	}
}

// tail is the part of a session's log a brain works from: every event of its thread after the last compaction's
// UpToSeq, in sequence order. The older part lives on only as the compaction's summary.
type tail struct {
	// multi: the tail of a thread of a multi-agent session, whose own status is in session.thread_status_*
	// events (statusType).
	multi   bool
	events  []apitype.Event
	summary string // the last compaction's summary, "" if the log was never compacted
	upToSeq int64  // the last sequence number the summary covers
	// carriedURLs are the URLs the events the compactions replaced gave web_fetch (sourceURLs), at most
	// maxCarriedURLs: a summary's text, which the model wrote, gives none.
	carriedURLs []sourceURL
	lastSeq     int64 // the last sequence number read
	// priorStatus is the type of the last session.status_* event before the tail ("" if none): a compaction in
	// the middle of a turn leaves the turn's running status before the tail. A tail read from the log and one a
	// compaction cut agree on it.
	priorStatus apitype.EventType
	// priorOutcome are the outcome events before the tail from the last processed user.define_outcome on: a
	// compaction does not end an outcome (see outcomeEvents).
	priorOutcome []apitype.Event
}
