package api

import (
	"bytes"
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

// checkRefs checks the events' references against the session's log and environment.
func (s *Server) checkRefs(r *http.Request, sess *apitype.Session, events []clientEvent) error {
	var env *apitype.Environment
	for _, ce := range events {
		if ce.ev.Type == apitype.EventUserToolResult {
			if env == nil {
				e, err := s.store.EnvironmentGet(r.Context(), sess.EnvironmentID)
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					return fmt.Errorf("environment %s: %w", sess.EnvironmentID, err)
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
			continue
		}
		ev, err := s.store.EventGet(r.Context(), sess.ID, ref.id)
		if errors.Is(err, store.ErrNotFound) {
			return invalid(ref.path, "no event %q in this session", ref.id)
		}
		if err != nil {
			return fmt.Errorf("event %s: %w", ref.id, err)
		}
		if !slices.Contains(ref.kinds, ev.Type) {
			return invalid(ref.path, "event %q is a %s, not %s", ref.id, ev.Type, join(ref.kinds, " or "))
		}
	}
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
	sess, err := s.store.SessionGet(r.Context(), id)
	if err != nil {
		return lookup(err, "session", id)
	}
	if sess.ArchivedAt != nil {
		return invalid("", "session %s is archived and accepts no more events", id)
	}
	if sess.Status == apitype.StatusTerminated {
		return invalid("", "session %s is terminated and accepts no more events", id)
	}
	if err := s.checkRefs(r, sess, events); err != nil {
		return err
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
	stored, err := s.store.EventAppend(r.Context(), &store.EventAppendParams{SessionID: id, Events: news, Wake: true})
	s.metrics.StoreAppend(time.Since(began), err)
	endAppendSpan(span, err)
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
	if _, err := s.store.SessionGet(r.Context(), id); err != nil {
		return lookup(err, "session", id)
	}
	events, err := s.store.EventList(r.Context(), p)
	if err != nil {
		return lookup(err, "session", id)
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
