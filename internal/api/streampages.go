package api

import (
	"context"
	"sync"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// streamPages lets the streams of a session that stand at the same place in its log read their next page once:
// when an append wakes a hundred subscribers, one of them reads the page and encodes its frames, and the others
// wait for that read and write the same frames. A stream joins a read only if the read began after the wake-up
// that sent it reading (store.Store.Wakes), so a joined read never misses an event the stream was woken for.
// Nothing outlives its readers: a page is dropped from the map when its read ends, and held by the streams
// writing it.
type streamPages struct {
	mu    sync.Mutex
	reads map[pageKey]*pageRead
}

// pageKey is what a read of the log depends on.
type pageKey struct {
	session string
	scope   eventScope
	after   int64
	limit   int
}

// pageRead is one read of a page, shared by the streams that join it.
type pageRead struct {
	wakes  uint64 // the session's wake-ups before the read began
	joined int    // streams waiting for it besides its reader (under streamPages.mu)
	done   chan struct{}
	page   *streamPage
	err    error
}

// streamPage is a page of the log as a stream writes it: each event's frame, encoded once.
type streamPage struct {
	events []pageEvent
	// size is the events' data and overhead (streamPager.read); n and dataSize tell whether the page ended
	// the log.
	n, dataSize int
}

// pageEvent is an event of a page without its data (which is in its frame).
type pageEvent struct {
	id    string
	typ   apitype.EventType
	seq   int64
	frame []byte
}

// read returns the page after k.after, from a read that began after the caller's latest wake-up: its own, or
// one it joined. A joined read that failed is done again alone, since its error may be its reader's.
func (p *streamPages) read(ctx context.Context, st store.Store, k pageKey) (*streamPage, error) {
	wakes := st.Wakes(k.session)
	p.mu.Lock()
	if r := p.reads[k]; r != nil && r.wakes >= wakes {
		r.joined++
		p.mu.Unlock()
		select {
		case <-r.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if r.err == nil {
			return r.page, nil
		}
		return readPage(ctx, st, k)
	}
	r := &pageRead{wakes: wakes, done: make(chan struct{})}
	if p.reads == nil {
		p.reads = map[pageKey]*pageRead{}
	}
	p.reads[k] = r
	p.mu.Unlock()

	r.page, r.err = readPage(ctx, st, k)
	p.mu.Lock()
	if p.reads[k] == r {
		delete(p.reads, k)
	}
	p.mu.Unlock()
	close(r.done)
	return r.page, r.err
}

// readPage reads a page of the log and encodes its frames.
func readPage(ctx context.Context, st store.Store, k pageKey) (*streamPage, error) {
	events, err := st.EventList(ctx, &store.EventListParams{SessionID: k.session, Scope: k.scope.scope,
		Thread: k.scope.thread, AfterSeq: k.after, Limit: k.limit, MaxBytes: streamPageBytes})
	if err != nil {
		return nil, err
	}
	page := &streamPage{events: make([]pageEvent, len(events)), n: len(events), dataSize: dataSize(events)}
	for i := range events {
		frame, err := eventFrame(&events[i])
		if err != nil {
			return nil, err
		}
		page.events[i] = pageEvent{id: events[i].ID, typ: events[i].Type, seq: events[i].Seq, frame: frame}
		events[i] = apitype.Event{} // its frame holds it now
	}
	return page, nil
}
