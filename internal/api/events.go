package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// sendResponse echoes the stored events, with their ids.
type sendResponse struct {
	Type string          `json:"type"`
	Data []apitype.Event `json:"data"`
}

// allPlain reports whether every event is a user.message, which refers to nothing in the log.
func allPlain(events []clientEvent) bool {
	for i := range events {
		if events[i].ev.Type != apitype.EventUserMessage || events[i].ref.id != "" {
			return false
		}
	}
	return true
}

// checkOpen answers the API's error for a session that does not exist, is archived or is terminated.
func (s *Server) checkOpen(ctx context.Context, id string) error {
	sess, err := s.store.SessionState(ctx, id)
	switch {
	case err != nil:
		return lookup(err, "session", id)
	case sess.ArchivedAt != nil:
		return invalid("", "session %s is archived and accepts no more events", id)
	case sess.Status == apitype.StatusTerminated:
		return invalid("", "session %s is terminated and accepts no more events", id)
	}
	return nil
}

// checkRefs checks the events' references against the session's log and environment, and routes each event
// to its thread (routeThread).
func (s *Server) checkRefs(r *http.Request, sessionID string, events []clientEvent) error {
	var env *apitype.Environment
	for i := range events {
		ce := &events[i]
		if ce.ev.Type == apitype.EventUserToolResult {
			if env == nil {
				full, err := s.store.SessionGet(r.Context(), sessionID) // the environment is in the document
				if err != nil {
					return lookup(err, "session", sessionID)
				}
				e, err := s.store.EnvironmentGet(r.Context(), full.EnvironmentID)
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					return fmt.Errorf("environment %s: %w", full.EnvironmentID, err)
				}
				if e == nil {
					e = &apitype.Environment{}
				}
				env = e
			}
			if env.Config.Type != apitype.EnvironmentSelfHosted {
				return invalid(path(ce.path, "type"), "user.tool_result is only accepted in self_hosted environments")
			}
		}
		ref := ce.ref
		if ref.id == "" {
			if err := s.routeInterrupt(r.Context(), sessionID, ce); err != nil {
				return err
			}
			continue
		}
		if err := checkString(ref.path, ref.id, true, 256); err != nil {
			return err
		}
		ev, err := s.store.EventGet(r.Context(), sessionID, ref.id)
		if errors.Is(err, store.ErrNotFound) {
			return invalid(ref.path, "no event %q in this session", ref.id)
		}
		if err != nil {
			return fmt.Errorf("event %s: %w", ref.id, err)
		}
		if !slices.Contains(ref.kinds, ev.Type) {
			return invalid(ref.path, "event %q is a %s, not %s", ref.id, ev.Type, join(ref.kinds, " or "))
		}
		if err := s.routeAnswer(r.Context(), sessionID, ce, ev); err != nil {
			return err
		}
	}
	return nil
}

// Routing: a session's log holds the events of all its threads (apitype.Event.Thread). A client's answer to a
// call (user.tool_confirmation, user.custom_tool_result, user.tool_result) goes to the thread that made the call;
// a user.interrupt with a session_thread_id to that thread; everything else, and an interrupt without one (which
// the brain carries to every thread), to the primary thread. An event routed to a child thread is cross-posted to
// the session's stream, and its data says which thread it went to (session_thread_id, set by the server).

// routeAnswer routes a client's answer to the thread of the call it answers (use). A child thread that no longer
// waits for any answer, because it was archived or terminated, refuses it. Like a single-agent session's, a
// thread accepts a second answer to one call, and the brain keeps the first.
func (s *Server) routeAnswer(ctx context.Context, sessionID string, ce *clientEvent, use *apitype.Event) error {
	if use.Thread == "" {
		return nil
	}
	t, err := s.store.ThreadGet(ctx, sessionID, use.Thread)
	if err != nil {
		return fmt.Errorf("thread %s of event %s: %w", use.Thread, use.ID, err)
	}
	switch {
	case t.ArchivedAt != nil:
		return invalid(ce.ref.path, "event %q belongs to thread %s, which is archived and no longer waits for an answer",
			use.ID, t.ID)
	case t.Status == apitype.StatusTerminated:
		return invalid(ce.ref.path, "event %q belongs to thread %s, which is terminated and no longer waits for an answer",
			use.ID, t.ID)
	}
	return toChild(ce, t.ID)
}

// routeInterrupt routes a user.interrupt that names a thread of the session to it.
func (s *Server) routeInterrupt(ctx context.Context, sessionID string, ce *clientEvent) error {
	if ce.ev.Type != apitype.EventUserInterrupt {
		return nil
	}
	var in apitype.UserInterrupt
	if err := json.Unmarshal(ce.ev.Data, &in); err != nil {
		return fmt.Errorf("%s: %w", ce.path, err)
	}
	if in.SessionThreadID == "" {
		return nil
	}
	if err := checkString(path(ce.path, "session_thread_id"), in.SessionThreadID, true, 256); err != nil {
		return err
	}
	t, err := s.store.ThreadGet(ctx, sessionID, in.SessionThreadID)
	if errors.Is(err, store.ErrNotFound) {
		return invalid(path(ce.path, "session_thread_id"), "no thread %q in this session", in.SessionThreadID)
	}
	if err != nil {
		return fmt.Errorf("thread %s: %w", in.SessionThreadID, err)
	}
	if t.Primary() {
		return nil
	}
	ce.ev.Thread, ce.ev.CrossPost = t.ID, true // the data names the thread already
	return nil
}

// toChild routes a client event to a child thread: the event is the thread's, cross-posted to the session's
// stream, and its data names the thread (session_thread_id).
func toChild(ce *clientEvent, threadID string) error {
	var data map[string]json.RawMessage
	if err := json.Unmarshal(ce.ev.Data, &data); err != nil {
		return fmt.Errorf("%s: %w", ce.path, err)
	}
	id, _ := json.Marshal(threadID) // a string always encodes
	data["session_thread_id"] = id
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("%s: %w", ce.path, err)
	}
	ce.ev.Data, ce.ev.Thread, ce.ev.CrossPost = b, threadID, true
	return nil
}

func (s *Server) eventSend(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("session_id")
	body, err := readBody(r)
	if err != nil {
		return err
	}
	events, err := parseSend(body)
	if err != nil {
		return err
	}
	if err := tokenMayAppend(r.Context(), events); err != nil {
		return err
	}
	if s.shares.RunningSessions > 0 { // no work on the event path without the share
		types := make([]apitype.EventType, len(events))
		for i := range events {
			types[i] = events[i].ev.Type
		}
		if err := s.admitTurn(r.Context(), w, id, types); err != nil {
			return err
		}
	}
	// Events that refer to others are checked against the session first; the append itself refuses a session
	// that is gone, archived or terminated, in its transaction (Open), so plain messages need no read before it.
	if !allPlain(events) {
		if err := s.checkOpen(r.Context(), id); err != nil {
			return err
		}
		if err := s.checkRefs(r, id, events); err != nil {
			return err
		}
	}
	for i := range events {
		if err := s.resolveRubric(r.Context(), events[i].path, &events[i].ev); err != nil {
			return err
		}
	}
	news := make([]apitype.NewEvent, len(events))
	for i, ce := range events {
		news[i] = traced(r.Context(), ce.ev)
	}
	began := time.Now()
	_, span := s.tracer.Start(r.Context(), "store.append", trace.WithAttributes(attribute.Int("corral.events", len(news))))
	stored, err := s.store.EventAppend(r.Context(), &store.EventAppendParams{SessionID: id, Events: news, Wake: true, Open: true})
	s.metrics.StoreAppend(time.Since(began), err)
	endAppendSpan(span, err)
	if errors.Is(err, store.ErrSessionClosed) {
		if err := s.checkOpen(r.Context(), id); err != nil { // which says how it closed
			return err
		}
		return invalid("", "session %s accepts no more events", id)
	}
	if err != nil {
		return lookup(err, "session", id)
	}
	return writeJSON(w, http.StatusOK, sendResponse{Type: "send_session_events", Data: stored})
}

// eventList serves GET /v1/sessions/{id}/events: a slice of the log, paged by sequence number.
func (s *Server) eventList(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("session_id")
	q := newQuery(r.URL)
	limit, err := q.limit(defaultEventLimit, maxEventLimit)
	if err != nil {
		return err
	}
	desc, err := q.desc(false)
	if err != nil {
		return err
	}
	c, err := q.page()
	if err != nil {
		return err
	}
	p := &store.EventListParams{SessionID: id, Types: listOf[apitype.EventType](q, "types"), Desc: desc, Limit: limit + 1}
	for i, t := range p.Types {
		if !validEventType(t) {
			return invalid(index("types", i), "invalid event type %q", t)
		}
	}
	var lp store.ListParams
	if err := q.createdFilters(&lp); err != nil {
		return err
	}
	p.CreatedAfter, p.CreatedFrom, p.CreatedBefore, p.CreatedTo = lp.CreatedAfter, lp.CreatedFrom, lp.CreatedBefore, lp.CreatedTo
	if c != nil {
		if c.Seq < 1 || c.ID != "" {
			return invalid("page", "invalid page token")
		}
		if desc {
			p.BeforeSeq = c.Seq
		} else {
			p.AfterSeq = c.Seq
		}
	}
	if _, err := s.store.SessionState(r.Context(), id); err != nil {
		return lookup(err, "session", id)
	}
	return s.writeEventPage(w, r, p, limit)
}

// writeEventPage writes the page of events p (asking for limit + 1) selects, with the cursor of the next page if
// there is one: a session's events and a thread's.
func (s *Server) writeEventPage(w http.ResponseWriter, r *http.Request, p *store.EventListParams, limit int) error {
	events, err := s.store.EventList(r.Context(), p)
	if err != nil {
		return lookup(err, "session", p.SessionID)
	}
	events, more := trim(events, limit)
	if events == nil {
		events = []apitype.Event{}
	}
	var next *string
	if more {
		next = seqCursor(events[len(events)-1].Seq)
	}
	return writeJSON(w, http.StatusOK, listPage[apitype.Event]{Data: events, NextPage: next})
}

// validEventType accepts dotted lowercase type names: the filter matches stored types, including types newer
// than this server knows.
func validEventType(t apitype.EventType) bool {
	if len(t) > 128 || !strings.Contains(string(t), ".") {
		return false
	}
	return !bytes.ContainsFunc([]byte(t), func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '.' && r != '_'
	})
}
