package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/corralhq/corral/internal/apitype"
)

// Event is one event as the API sends it, from a list, a send or a stream: the fields every event has, and
// the whole object for its type-specific fields (Decode).
type Event struct {
	ID          string
	Type        apitype.EventType
	ProcessedAt *time.Time
	// Raw is the event's JSON object as received.
	Raw json.RawMessage
}

// UnmarshalJSON keeps the whole object in Raw.
func (e *Event) UnmarshalJSON(b []byte) error {
	var head struct {
		ID          string            `json:"id"`
		Type        apitype.EventType `json:"type"`
		ProcessedAt *time.Time        `json:"processed_at"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return err
	}
	*e = Event{ID: head.ID, Type: head.Type, ProcessedAt: head.ProcessedAt, Raw: bytes.Clone(b)}
	return nil
}

// MarshalJSON writes Raw.
func (e Event) MarshalJSON() ([]byte, error) {
	if len(e.Raw) == 0 {
		return []byte("null"), nil
	}
	return e.Raw, nil
}

// Decode decodes the event's fields into v, a payload type of apitype (apitype.SessionIdle for a
// session.status_idle, apitype.Preview for an event_start, ...).
func (e *Event) Decode(v any) error {
	if err := json.Unmarshal(e.Raw, v); err != nil {
		return fmt.Errorf("decode %s event %s: %w", e.Type, e.ID, err)
	}
	return nil
}

// TurnOver reports whether the event ends the session's turn for good: idle with a stop reason other than
// requires_action, terminated, or deleted.
func (e *Event) TurnOver() bool {
	switch e.Type {
	case apitype.EventSessionStatusTerminated, apitype.EventSessionDeleted:
		return true
	case apitype.EventSessionStatusIdle:
		var idle struct {
			StopReason *apitype.StopReason `json:"stop_reason"`
		}
		if e.Decode(&idle) != nil {
			return false
		}
		return idle.StopReason == nil || idle.StopReason.Type != apitype.StopRequiresAction
	}
	return false
}

// wireEvent is a NewEvent in its wire form: {"type":...,<Data's fields>}.
type wireEvent apitype.NewEvent

func (e wireEvent) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	typ, _ := json.Marshal(e.Type) // a string always encodes
	b.WriteString(`{"type":`)
	b.Write(typ)
	data := bytes.TrimSpace(e.Data)
	if len(data) > 0 && !bytes.Equal(data, []byte("null")) {
		if data[0] != '{' || data[len(data)-1] != '}' {
			return nil, fmt.Errorf("%s event: data is not a JSON object", e.Type)
		}
		if inner := bytes.TrimSpace(data[1 : len(data)-1]); len(inner) > 0 {
			b.WriteByte(',')
			b.Write(inner)
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UserMessage returns a user.message with one text block.
func UserMessage(text string) apitype.NewEvent {
	ev, _ := apitype.MakeEvent(apitype.EventUserMessage, apitype.UserMessage{Content: []apitype.ContentBlock{apitype.TextBlock(text)}})
	return ev // the payload always encodes
}

// UserInterrupt returns a user.interrupt.
func UserInterrupt() apitype.NewEvent {
	return apitype.NewEvent{Type: apitype.EventUserInterrupt, Data: json.RawMessage("{}")}
}

// EventSend appends client events to the session's log and returns them as stored (with their ids).
func (c *Client) EventSend(ctx context.Context, sessionID string, events ...apitype.NewEvent) ([]Event, error) {
	body := struct {
		Events []wireEvent `json:"events"`
	}{make([]wireEvent, len(events))}
	for i, e := range events {
		body.Events[i] = wireEvent(e)
	}
	var out struct {
		Data []Event `json:"data"`
	}
	if err := c.do(ctx, "POST", pathOf("/v1/sessions/", sessionID, "/events"), nil, body, &out); err != nil {
		return nil, err
	}
	return out.Data, nil
}

// EventListParams selects and pages GET /v1/sessions/{id}/events.
type EventListParams struct {
	// Limit is the page size (0: the server's default, 100; at most 1000).
	Limit int
	// Desc lists newest first (the default is oldest first).
	Desc bool
	// Page is a token from a previous page's NextPage.
	Page string
	// Types lists only events of these types.
	Types []apitype.EventType
}

func (p *EventListParams) values() url.Values {
	q := url.Values{}
	if p == nil {
		return q
	}
	if p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.Desc {
		q.Set("order", "desc")
	} else {
		q.Set("order", "asc")
	}
	if p.Page != "" {
		q.Set("page", p.Page)
	}
	for _, t := range p.Types {
		q.Add("types[]", string(t))
	}
	return q
}

// EventList returns a page of the session's log.
func (c *Client) EventList(ctx context.Context, sessionID string, p *EventListParams) (*Page[Event], error) {
	return call[Page[Event]](ctx, c, "GET", pathOf("/v1/sessions/", sessionID, "/events"), p.values(), nil)
}

// ThreadEventList returns a page of a session thread's own events, oldest first; of p, only Limit and Page apply.
func (c *Client) ThreadEventList(ctx context.Context, sessionID, threadID string, p *EventListParams) (*Page[Event], error) {
	q := url.Values{}
	if p != nil && p.Limit > 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p != nil && p.Page != "" {
		q.Set("page", p.Page)
	}
	return call[Page[Event]](ctx, c, "GET", pathOf("/v1/sessions/", sessionID, "/threads/", threadID, "/events"), q, nil)
}

// Events iterates over the session's log from p (nil: every event, oldest first, 1000 a page), fetching page
// after page. It stops at the first error, which it yields.
func (c *Client) Events(ctx context.Context, sessionID string, p *EventListParams) iter.Seq2[*Event, error] {
	q := EventListParams{Limit: 1000}
	if p != nil {
		q = *p
	}
	return func(yield func(*Event, error) bool) {
		for {
			page, err := c.EventList(ctx, sessionID, &q)
			if err != nil {
				yield(nil, err)
				return
			}
			for i := range page.Data {
				if !yield(&page.Data[i], nil) {
					return
				}
			}
			if q.Page = page.Next(); q.Page == "" {
				return
			}
		}
	}
}

// StreamParams says where an event stream starts and what it carries.
type StreamParams struct {
	// LastEventID resumes after that event: an event id, or a sequence number ("0" replays the whole log).
	// Empty starts with the events appended after the stream opened.
	LastEventID string
	// EventDeltas asks for event_start / event_delta previews of these types (apitype.EventAgentMessage,
	// apitype.EventAgentThinking), interleaved with the events.
	EventDeltas []string
	// MaxFrame bounds a frame (0: DefaultMaxFrame).
	MaxFrame int
}

// Stream is an open SSE stream of one session's events. It is not safe for concurrent use.
type Stream struct {
	body io.ReadCloser
	r    *SSEReader
	last string
}

// EventStream opens the session's event stream. It returns once the server has answered with the stream's
// headers: the server has subscribed by then, so every event appended afterwards is delivered on it.
func (c *Client) EventStream(ctx context.Context, sessionID string, p *StreamParams) (*Stream, error) {
	if p == nil {
		p = &StreamParams{}
	}
	h := http.Header{"Accept": {"text/event-stream"}}
	if p.LastEventID != "" {
		h.Set("Last-Event-ID", p.LastEventID)
	}
	q := url.Values{}
	for _, t := range p.EventDeltas {
		q.Add("event_deltas[]", t)
	}
	resp, err := c.request(ctx, "GET", pathOf("/v1/sessions/", sessionID, "/events/stream"), q, nil, h)
	if err != nil {
		return nil, err
	}
	return &Stream{body: resp.Body, r: NewSSEReader(resp.Body, p.MaxFrame), last: p.LastEventID}, nil
}

// Next returns the next event or preview. An error frame comes back as an *Error with Status 0; the end of the
// stream as io.EOF (the server ends it after session.deleted or session.status_terminated).
func (s *Stream) Next() (*Event, error) {
	f, err := s.r.Next()
	if err != nil {
		return nil, err
	}
	if f.Event == "error" {
		var env apitype.ErrorEnvelope
		if json.Unmarshal(f.Data, &env) != nil {
			return nil, &Error{Type: string(apitype.ErrAPI), Message: string(f.Data)}
		}
		return nil, &Error{Type: string(env.Error.Type), Message: env.Error.Message, RequestID: env.RequestID, Details: env.Error.Details}
	}
	var ev Event
	if err := json.Unmarshal(f.Data, &ev); err != nil {
		return nil, fmt.Errorf("stream frame %q: %w", f.Event, err)
	}
	if f.ID != "" {
		s.last = f.ID
	}
	return &ev, nil
}

// LastEventID is the id of the last event read (or the one the stream resumed after): where to resume.
func (s *Stream) LastEventID() string { return s.last }

// Close closes the stream.
func (s *Stream) Close() error { return s.body.Close() }

// Follow streams the session's events after p.LastEventID to fn until fn returns false, the stream ends for
// good (session.deleted or session.status_terminated), ctx is done (it returns ctx.Err()) or the server
// answers with an error that is not Temporary. A dropped connection or a temporary error is retried with
// backoff (200 ms to 5 s), resuming with Last-Event-ID after the last event fn was given, so nothing is missed
// or repeated.
func (c *Client) Follow(ctx context.Context, sessionID string, p *StreamParams, fn func(*Event) bool) error {
	q := StreamParams{}
	if p != nil {
		q = *p
	}
	const minBackoff = 200 * time.Millisecond
	backoff := minBackoff
	for {
		from := q.LastEventID
		done, err := c.followOnce(ctx, sessionID, &q, fn)
		if done {
			return nil
		}
		if q.LastEventID != from {
			backoff = minBackoff // the connection delivered events: it was not the server refusing
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if e, ok := errors.AsType[*Error](err); ok && !e.Temporary() {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// followOnce reads one connection; done means Follow is over. It moves q.LastEventID as events are handed out.
func (c *Client) followOnce(ctx context.Context, sessionID string, q *StreamParams, fn func(*Event) bool) (done bool, err error) {
	s, err := c.EventStream(ctx, sessionID, q)
	if err != nil {
		return false, err
	}
	defer s.Close()
	for {
		ev, err := s.Next()
		if err != nil {
			return false, err
		}
		if ev.ID != "" {
			q.LastEventID = ev.ID
		}
		if !fn(ev) {
			return true, nil
		}
		if ev.Type == apitype.EventSessionDeleted || ev.Type == apitype.EventSessionStatusTerminated {
			return true, nil
		}
	}
}
