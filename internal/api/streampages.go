package api

import (
	"context"
	"sync"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// streamPages lets the streams of a session that stand at the same place in its log read their next page once:
// when an append wakes a hundred subscribers, one of them reads the page and encodes its frames, and the others
// take that page, whether its read is still going on or has ended, and write the same frames. A stream takes a
// read's page only if the read began after the wake-up that sent it reading (store.Store.Wakes), so it never
// misses an event it was woken for. A session's latest page (at most retainedPageBytes) is kept while the session
// has streams open (open, close), for the streams that the scheduler runs after its read ended: the pages kept
// are bounded by the open streams, as the pages the streams hold are.
type streamPages struct {
	mu       sync.Mutex
	sessions map[string]*sessionPages
}

// sessionPages are a session's reads, in flight or kept, and its open streams.
type sessionPages struct {
	streams int
	reads   map[pageKey]*pageRead
}

// retainedPageBytes: a page larger than this is not kept once read (its frames' bytes).
const retainedPageBytes = 64 << 10

// pageKey is what a read of the log depends on.
type pageKey struct {
	scope eventScope
	after int64
	limit int
}

// pageRead is one read of a page, shared by the streams that take it.
type pageRead struct {
	wakes  uint64 // the session's wake-ups before the read began
	joined int    // streams that took it besides its reader (under streamPages.mu)
	ended  bool   // its page or error is set (under streamPages.mu)
	done   chan struct{}
	page   *streamPage
	err    error
}

// streamPage is a page of the log as a stream writes it: each event's frame, encoded once.
type streamPage struct {
	events []pageEvent
	// n and dataSize are the events' number and their data's bytes (streamPager.read, and whether the page
	// ended the log); bytes is the frames'.
	n, dataSize, bytes int
}

// pageEvent is an event of a page without its data (which is in its frame).
type pageEvent struct {
	id    string
	typ   apitype.EventType
	seq   int64
	frame []byte
}

// open counts a stream of the session; close, called once for each open, uncounts it and drops the session's
// pages with its last stream.
func (p *streamPages) open(session string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sessions == nil {
		p.sessions = map[string]*sessionPages{}
	}
	sp := p.sessions[session]
	if sp == nil {
		sp = &sessionPages{reads: map[pageKey]*pageRead{}}
		p.sessions[session] = sp
	}
	sp.streams++
}

func (p *streamPages) close(session string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sp := p.sessions[session]; sp != nil {
		if sp.streams--; sp.streams <= 0 {
			delete(p.sessions, session)
		}
	}
}

// read returns the page of the session's log after k.after, from a read that began after the caller's latest
// wake-up: its own, or one it took. A taken read that failed is done again alone, since its error may be its
// reader's. The caller has the session open.
func (p *streamPages) read(ctx context.Context, st store.Store, session string, k pageKey) (*streamPage, error) {
	wakes := st.Wakes(session)
	p.mu.Lock()
	sp := p.sessions[session]
	if sp == nil { // not open: read alone
		p.mu.Unlock()
		return readPage(ctx, st, session, k)
	}
	if r := sp.reads[k]; r != nil && r.wakes >= wakes {
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
		return readPage(ctx, st, session, k)
	}
	r := &pageRead{wakes: wakes, done: make(chan struct{})}
	sp.reads[k] = r
	p.mu.Unlock()

	page, err := readPage(ctx, st, session, k)
	p.mu.Lock()
	r.page, r.err, r.ended = page, err, true
	if sp.reads[k] == r && (r.err != nil || r.page.bytes > retainedPageBytes) {
		delete(sp.reads, k)
	}
	if r.err == nil {
		// The session's older pages that have been read are no longer anyone's next page but a late stream's.
		for ok, or := range sp.reads {
			if or != r && or.ended && or.wakes <= r.wakes {
				delete(sp.reads, ok)
			}
		}
	}
	p.mu.Unlock()
	close(r.done)
	return r.page, r.err
}

// readPage reads a page of the log and encodes its frames.
func readPage(ctx context.Context, st store.Store, session string, k pageKey) (*streamPage, error) {
	events, err := st.EventList(ctx, &store.EventListParams{SessionID: session, Scope: k.scope.scope,
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
		page.bytes += len(frame)
		events[i] = apitype.Event{} // its frame holds it now
	}
	return page, nil
}
