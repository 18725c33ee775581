package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// A stream reads the log a page at a time and reads the next page only once the previous one is written, so
// what a stream holds is its page (and the frame being written): a client that does not read blocks the
// writes, not the memory. A page is capped in bytes, not only in events: streamBatch is its most events, and
// the store ends it at the event that brings it to streamPageBytes (EventListParams.MaxBytes), so a page holds
// at most streamPageBytes plus one event. The number of events asked for follows the sizes of the events read
// before (streamPager), so that a log of large events is not read, and dropped, a page of 500 at a time.
const (
	streamBatch     = 500
	streamFirstPage = 1
	streamPageBytes = 256 << 10
	// streamEventOverhead is counted per event besides its data: ids, type, times, framing.
	streamEventOverhead = 256
)

// sseWriteTimeout is the default bound on each write to a stream (Config.StreamWriteTimeout). A stream has no
// overall write deadline, so without this a client that stays connected but stops reading would hold its
// handler, and its subscription, forever; with it, a client that falls that far behind is disconnected and
// resumes with Last-Event-ID.
const sseWriteTimeout = DefaultStreamWriteTimeout

// eventStream serves GET /v1/sessions/{id}/events/stream: Server-Sent Events read from the log.
//
// It subscribes before it fixes its position, so no append is lost between the two. Without Last-Event-ID it
// sends only events appended after the stream opened, like the hosted service; with Last-Event-ID (an event id
// or a sequence number, Corral's extension) it first replays every event after that one, so a client that
// reconnects misses nothing. It also polls when the store cannot notify across processes, sends ": ping"
// comments when idle, and ends with a session.deleted event when the session is deleted.
//
// With event_deltas (agent.message, agent.thinking) it also subscribes to the session's previews and writes
// those of the requested types as event_start / event_delta frames, without an id: they are not log events, so
// they do not move Last-Event-ID. See previewFilter for how they are kept consistent with the log's events.
func (s *Server) eventStream(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("session_id")
	if _, err := s.store.SessionState(r.Context(), id); err != nil {
		return lookup(err, "session", id)
	}
	return s.stream(w, r, id, eventScope{})
}

// eventScope is whose events a stream or a list reads: the session's (the zero value: the primary thread's
// and the cross-posted ones) or one thread's own.
type eventScope struct {
	scope  store.EventScope
	thread string // with store.ScopeThread: "" the primary thread, else a child's id
}

// stream serves the events of a session, in a scope, as Server-Sent Events (eventStream says how). The
// caller has checked that the session (and the thread) exists.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, id string, sc eventScope) error {
	ctx := r.Context()
	pf, err := newPreviewFilter(listOf[apitype.EventType](newQuery(r.URL), "event_deltas"))
	if err != nil {
		return err
	}
	release, err := s.streams.acquire(callerID(ctx))
	if err != nil {
		w.Header().Set("retry-after", "1")
		return err
	}
	defer release()
	s.metrics.Streams(1)
	defer s.metrics.Streams(-1)
	var previews <-chan []byte
	if pf != nil {
		ch, stop := s.store.PreviewSubscribe(id)
		defer stop()
		previews = ch
	}
	wake, unsubscribe := s.store.Subscribe(id)
	defer unsubscribe()
	s.pages.open(id)
	defer s.pages.close(id)
	pos, err := s.streamStart(ctx, id, r.Header.Get("Last-Event-ID"))
	if err != nil {
		return err
	}

	rc := http.NewResponseController(w)
	sse := &sseWriter{w: w, rc: rc, timeout: s.writeTimeout, previews: pf, previewCh: previews}
	// A stream outlives the server's write timeout, but each of its writes, the headers' too, has a deadline
	// of its own. Not every writer can.
	_ = rc.SetWriteDeadline(sse.deadline())
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return nil
	}

	heartbeat := time.NewTicker(s.heartbeat)
	defer heartbeat.Stop()
	var poll <-chan time.Time
	if !s.store.Capabilities().CrossProcessNotify {
		t := time.NewTicker(s.poll)
		defer t.Stop()
		poll = t.C
	}
	page := &streamPager{limit: streamFirstPage}
	// woken: the read follows a wake-up, so it may share another stream's (streamPages); the first read and
	// those after a poll or a heartbeat read alone, since a wake-up count says nothing of what they look for.
	read, woken := true, false
	for {
		if read {
			done, err := s.streamDrain(ctx, sse, id, sc, &pos, page, woken)
			if done || err != nil {
				if err != nil && ctx.Err() == nil {
					s.log.Error("api: event stream failed", "request_id", requestID(ctx), "session", id, "err", err)
					sse.error(apitype.ErrorEnvelope{Type: apitype.ObjectError, RequestID: requestID(ctx),
						Error: apitype.ErrorDetail{Type: apitype.ErrAPI, Message: "internal server error"}})
				}
				return nil
			}
		}
		read, woken = true, false
		select {
		case <-ctx.Done():
			return nil
		case p := <-previews:
			if sse.preview(p) != nil {
				return nil
			}
			read = false // a preview is not a log event: no need to read the log
		case <-wake:
			woken = true
		case <-poll:
		case <-heartbeat.C:
			if sse.comment("ping") != nil {
				return nil
			}
		}
	}
}

// previewFilter decides which previews a stream writes: those of the requested types, and only while they can
// still make sense to the client. An event_delta is written only after its event_start was; a preview of an
// event the stream has already written (a late one) or of a model request that has ended is dropped, since
// the SDK's accumulator would otherwise reopen a finished message or keep an orphan.
type previewFilter struct {
	types map[apitype.EventType]bool
	open  map[string]bool // previews started on this stream whose event has not been written
	done  map[string]bool // ids of previewed types written as events (bounded: reset when large)
}

// maxDoneIDs bounds previewFilter.done; late previews older than that many events are not recognised.
const maxDoneIDs = 1024

// newPreviewFilter parses event_deltas; nil means the stream wants no previews.
func newPreviewFilter(types []apitype.EventType) (*previewFilter, error) {
	if len(types) == 0 {
		return nil, nil
	}
	f := &previewFilter{types: map[apitype.EventType]bool{}, open: map[string]bool{}, done: map[string]bool{}}
	for _, t := range types {
		if t != apitype.EventAgentMessage && t != apitype.EventAgentThinking {
			return nil, invalid("event_deltas", "unknown event type %q: want %s or %s", t,
				apitype.EventAgentMessage, apitype.EventAgentThinking)
		}
		f.types[t] = true
	}
	return f, nil
}

// allow reports whether to write the preview.
func (f *previewFilter) allow(p *apitype.Preview) bool {
	typ, id, ok := p.Previewed()
	if !ok || !f.types[typ] || f.done[id] {
		return false
	}
	if p.Type == apitype.EventStart {
		f.open[id] = true
		return true
	}
	return f.open[id]
}

// written records an event written to the stream: the event a preview was about closes it, and the end of a
// model request closes every preview of it.
func (f *previewFilter) written(id string, typ apitype.EventType) {
	switch typ {
	case apitype.EventAgentMessage, apitype.EventAgentThinking:
		delete(f.open, id)
		if len(f.done) >= maxDoneIDs {
			clear(f.done)
		}
		f.done[id] = true
	case apitype.EventSpanModelRequestEnd:
		for id := range f.open {
			if len(f.done) >= maxDoneIDs {
				clear(f.done)
			}
			f.done[id] = true
		}
		clear(f.open)
	}
}

// streamStart resolves where the stream begins: after the Last-Event-ID, or after the current end of the log.
func (s *Server) streamStart(ctx context.Context, sessionID, lastEventID string) (int64, error) {
	lastEventID = strings.TrimSpace(lastEventID)
	if lastEventID != "" {
		if seq, err := strconv.ParseInt(lastEventID, 10, 64); err == nil {
			if seq < 0 {
				return 0, invalid("Last-Event-ID", "must be an event id or a sequence number >= 0")
			}
			return seq, nil
		}
		ev, err := s.store.EventGet(ctx, sessionID, lastEventID)
		if errors.Is(err, store.ErrNotFound) {
			return 0, invalid("Last-Event-ID", "no event %q in session %s", lastEventID, sessionID)
		}
		if err != nil {
			return 0, fmt.Errorf("event %s: %w", lastEventID, err)
		}
		return ev.Seq, nil
	}
	tail, err := s.store.EventList(ctx, &store.EventListParams{SessionID: sessionID, Scope: store.ScopeAll, Desc: true,
		Limit: 1})
	if err != nil {
		return 0, lookup(err, "session", sessionID)
	}
	if len(tail) == 0 {
		return 0, nil
	}
	return tail[0].Seq, nil
}

// streamPager sizes a stream's pages of the log by the bytes of the events it has read (see streamPageBytes).
type streamPager struct {
	limit int // events to ask for in the next page
}

// read records a page of the log, n events and their data's bytes, read with the current limit, and sizes the
// next one.
func (p *streamPager) read(n, data int) {
	size := data + n*streamEventOverhead
	switch {
	case size > streamPageBytes:
		p.limit = max(1, p.limit*streamPageBytes/size)
	case n == p.limit && size <= streamPageBytes/2:
		p.limit = min(streamBatch, 2*p.limit)
	}
}

// dataSize is the length of the events' data.
func dataSize(events []apitype.Event) int {
	n := 0
	for i := range events {
		n += len(events[i].Data)
	}
	return n
}

// streamDrain writes every event after *pos, a page at a time. done means the stream is over: the session was
// deleted or terminated (a child thread's stream: the thread terminated), or the client went away. woken says the
// read follows a wake-up and may share another stream's (streamPages).
func (s *Server) streamDrain(ctx context.Context, sse *sseWriter, sessionID string, sc eventScope, pos *int64,
	page *streamPager, woken bool,
) (done bool, err error) {
	for {
		limit := page.limit
		k := pageKey{scope: sc, after: *pos, limit: limit}
		var read *streamPage
		if woken {
			read, err = s.pages.read(ctx, s.store, sessionID, k)
		} else {
			read, err = readPage(ctx, s.store, sessionID, k)
		}
		if errors.Is(err, store.ErrNotFound) {
			now := s.now()
			_ = sse.event(apitype.Event{ID: apitype.NewID(apitype.PrefixEvent), Type: apitype.EventSessionDeleted,
				SessionID: sessionID, CreatedAt: now, ProcessedAt: &now, Data: json.RawMessage("{}")})
			return true, nil
		}
		if err != nil {
			return true, err
		}
		// A brain publishes an answer's previews before it appends the answer, so by now the previews of these
		// events are queued: write them first, so that a preview precedes its event.
		if sse.pendingPreviews() != nil {
			return true, nil
		}
		page.read(read.n, read.dataSize)
		last := read.n < limit && read.dataSize < streamPageBytes // the end of the log, not of a page
		for _, ev := range read.events {
			if err := sse.write(ev.frame); err != nil {
				return true, nil
			}
			if sse.previews != nil {
				sse.previews.written(ev.id, ev.typ)
			}
			*pos = ev.seq
			if ev.typ == apitype.EventSessionDeleted || ev.typ == apitype.EventSessionStatusTerminated ||
				(sc.thread != "" && ev.typ == apitype.EventSessionThreadStatusTerminated) {
				return true, nil
			}
		}
		if last {
			return false, nil
		}
	}
}

// sseWriter frames Server-Sent Events and flushes after each.
type sseWriter struct {
	w  io.Writer
	rc *http.ResponseController
	// timeout bounds each write; zero means sseWriteTimeout.
	timeout time.Duration
	// previews, if set, filters the previews the stream writes and follows the events it writes; previewCh
	// is the stream's subscription.
	previews  *previewFilter
	previewCh <-chan []byte
}

// pendingPreviews writes the previews queued on the subscription.
func (s *sseWriter) pendingPreviews() error {
	for {
		select {
		case p := <-s.previewCh:
			if err := s.preview(p); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

// event writes "id: <id>\nevent: <type>\ndata: <json>\n\n". The JSON is encoded into the frame itself, not
// copied into it: an event can be large, and a stream holds what it is writing. encoding/json writes no raw
// line break (it escapes them in strings and compacts raw messages), so the data is one line.
func (s *sseWriter) event(ev apitype.Event) error {
	frame, err := eventFrame(&ev)
	if err != nil {
		return err
	}
	if s.previews != nil {
		s.previews.written(ev.ID, ev.Type)
	}
	return s.write(frame)
}

// eventFrame is an event's frame, as sseWriter.event writes it.
func eventFrame(ev *apitype.Event) ([]byte, error) {
	var b bytes.Buffer
	b.Grow(len(ev.Data) + 512)
	if ev.ID != "" {
		b.WriteString("id: " + sseField(ev.ID) + "\n")
	}
	b.WriteString("event: " + sseField(string(ev.Type)) + "\ndata: ")
	if err := json.NewEncoder(&b).Encode(ev); err != nil { // ends the data line
		return nil, err
	}
	b.WriteByte('\n')
	return b.Bytes(), nil
}

// preview writes a preview the filter allows as "event: <type>\ndata: <json>\n\n", with no id: it is not a
// log event, and must not move the client's Last-Event-ID. A payload that is not a preview is skipped.
func (s *sseWriter) preview(payload []byte) error {
	var p apitype.Preview
	if s.previews == nil || json.Unmarshal(payload, &p) != nil || !s.previews.allow(&p) {
		return nil
	}
	return s.frame("", string(p.Type), payload)
}

func (s *sseWriter) error(env apitype.ErrorEnvelope) {
	data, _ := json.Marshal(env) // the envelope always encodes
	_ = s.frame("", "error", data)
}

// comment writes ": text\n\n", which clients ignore; it keeps proxies and idle timeouts at bay.
func (s *sseWriter) comment(text string) error {
	_ = s.rc.SetWriteDeadline(s.deadline()) // not every writer can
	if _, err := io.WriteString(s.w, ": "+text+"\n\n"); err != nil {
		return err
	}
	return s.rc.Flush()
}

func (s *sseWriter) frame(id, typ string, data []byte) error {
	var b bytes.Buffer
	b.Grow(len(id) + len(typ) + len(data) + 64) // one allocation of the frame's size, not doublings past it
	if id != "" {
		b.WriteString("id: " + sseField(id) + "\n")
	}
	b.WriteString("event: " + sseField(typ) + "\n")
	// JSON from encoding/json has no raw line breaks, but split defensively so a frame can never be broken: a
	// reader ends a line at "\r\n", "\r" or "\n".
	if bytes.IndexByte(data, '\r') >= 0 {
		data = bytes.ReplaceAll(bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n")), []byte("\r"), []byte("\n"))
	}
	for _, line := range bytes.Split(data, []byte("\n")) {
		b.WriteString("data: ")
		b.Write(line)
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	return s.write(b.Bytes())
}

// write writes one frame under a deadline of its own and flushes it.
func (s *sseWriter) write(frame []byte) error {
	_ = s.rc.SetWriteDeadline(s.deadline()) // not every writer can
	if _, err := s.w.Write(frame); err != nil {
		return err
	}
	return s.rc.Flush()
}

// deadline is the write deadline of a write starting now.
func (s *sseWriter) deadline() time.Time {
	return time.Now().Add(cmp.Or(s.timeout, sseWriteTimeout))
}

// streamSlots counts the open event streams, overall and per API key, and refuses those beyond the caps.
type streamSlots struct {
	max, perKey int
	mu          sync.Mutex
	total       int
	keys        map[string]int
}

func newStreamSlots(max, perKey int) *streamSlots {
	return &streamSlots{max: max, perKey: perKey, keys: map[string]int{}}
}

// acquire takes a slot for a stream of the key, or returns a 429 error; release gives it back.
func (l *streamSlots) acquire(key string) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.total >= l.max:
		return nil, &apiError{status: http.StatusTooManyRequests, typ: apitype.ErrRateLimit,
			msg: fmt.Sprintf("too many event streams open on this server (%d); retry later", l.max)}
	case l.keys[key] >= l.perKey:
		return nil, &apiError{status: http.StatusTooManyRequests, typ: apitype.ErrRateLimit,
			msg: fmt.Sprintf("too many event streams open with this API key (%d); close one or retry later", l.perKey)}
	}
	l.total++
	l.keys[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.total--
			if l.keys[key]--; l.keys[key] == 0 {
				delete(l.keys, key)
			}
		})
	}, nil
}

// open returns the number of open streams.
func (l *streamSlots) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// sseField strips line breaks from a header-like SSE field.
func sseField(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return sseFieldBreaks.Replace(s)
}

// sseFieldBreaks drops line breaks (a Replacer is built on its first use: one for all).
var sseFieldBreaks = strings.NewReplacer("\r", "", "\n", "")
