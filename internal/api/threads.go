package api

import (
	"context"
	"net/http"
	"slices"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// The threads of a multi-agent session (§2.7): the primary thread and the children its agents start. A
// single-agent session has none. Threads are written by the brain, with the events that say so; the API reads
// them, archives an idle child, and serves each thread's own events (a list and a stream).

const (
	defaultThreadLimit = 1000
	maxThreadLimit     = 1000
)

// threadStatuses are the statuses a thread can have (statuses[] of the list).
var threadStatuses = []string{apitype.StatusRunning, apitype.StatusIdle, apitype.StatusRescheduling,
	apitype.StatusTerminated}

// thread returns a thread of the session, or the API's 404 for an unknown session or a thread it does not have.
func (s *Server) thread(ctx context.Context, sessionID, threadID string) (*apitype.SessionThread, error) {
	if _, err := s.store.SessionState(ctx, sessionID); err != nil {
		return nil, lookup(err, "session", sessionID)
	}
	t, err := s.store.ThreadGet(ctx, sessionID, threadID)
	if err != nil {
		return nil, lookup(err, "session thread", threadID)
	}
	return t, nil
}

// threadScope is the scope of a thread's own events.
func threadScope(t *apitype.SessionThread) eventScope {
	if t.Primary() {
		return eventScope{scope: store.ScopeThread}
	}
	return eventScope{scope: store.ScopeThread, thread: t.ID}
}

// threadList serves GET /v1/sessions/{session_id}/threads: ordered by creation, paged forward.
func (s *Server) threadList(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("session_id")
	q := newQuery(r.URL)
	limit, err := q.limit(defaultThreadLimit, maxThreadLimit)
	if err != nil {
		return err
	}
	c, err := q.page()
	if err != nil {
		return err
	}
	p := &store.ThreadListParams{SessionID: id, Statuses: q.list("statuses"), Limit: limit + 1}
	for i, st := range p.Statuses {
		if !slices.Contains(threadStatuses, st) {
			return invalid(index("statuses", i), "unknown status %q (want one of %s)", st, join(threadStatuses, ", "))
		}
	}
	if c != nil {
		var lp store.ListParams
		if c.Back {
			return invalid("page", "invalid page token")
		}
		if err := itemPageInto(c, &lp); err != nil {
			return err
		}
		p.After = lp.After
	}
	if _, err := s.store.SessionState(r.Context(), id); err != nil {
		return lookup(err, "session", id)
	}
	threads, err := s.store.ThreadList(r.Context(), p)
	if err != nil {
		return lookup(err, "session", id)
	}
	threads, more := trim(threads, limit)
	if threads == nil {
		threads = []apitype.SessionThread{}
	}
	var next *string
	if more {
		last := threads[len(threads)-1]
		next = itemCursor(last.CreatedAt, last.ID, false)
	}
	return writeJSON(w, http.StatusOK, listPage[apitype.SessionThread]{Data: threads, NextPage: next})
}

// threadGet serves GET /v1/sessions/{session_id}/threads/{thread_id}.
func (s *Server) threadGet(w http.ResponseWriter, r *http.Request) error {
	t, err := s.thread(r.Context(), r.PathValue("session_id"), r.PathValue("thread_id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, t)
}

// threadArchive serves POST /v1/sessions/{session_id}/threads/{thread_id}/archive. Only a child thread that is
// done for now (idle) or for good (terminated) can be archived: the primary thread is the session's, and a
// running thread is still at work. Archiving an archived thread returns it unchanged.
func (s *Server) threadArchive(w http.ResponseWriter, r *http.Request) error {
	sessionID, threadID := r.PathValue("session_id"), r.PathValue("thread_id")
	if _, err := s.thread(r.Context(), sessionID, threadID); err != nil {
		return err
	}
	t, err := s.store.ThreadArchive(r.Context(), sessionID, threadID, func(t *apitype.SessionThread) error {
		switch {
		case t.Primary():
			return invalid("", "thread %s is the session's primary thread, which cannot be archived", t.ID)
		case t.ArchivedAt != nil:
			return nil
		case t.Status != apitype.StatusIdle && t.Status != apitype.StatusTerminated:
			return invalid("", "thread %s is %s: only an idle (or terminated) thread can be archived", t.ID, t.Status)
		}
		return nil
	})
	if err != nil {
		return lookup(err, "session thread", threadID)
	}
	return writeJSON(w, http.StatusOK, t)
}

// threadEvents serves GET /v1/sessions/{session_id}/threads/{thread_id}/events: the thread's own events, paged
// by sequence number.
func (s *Server) threadEvents(w http.ResponseWriter, r *http.Request) error {
	sessionID := r.PathValue("session_id")
	q := newQuery(r.URL)
	limit, err := q.limit(defaultEventLimit, maxEventLimit)
	if err != nil {
		return err
	}
	c, err := q.page()
	if err != nil {
		return err
	}
	t, err := s.thread(r.Context(), sessionID, r.PathValue("thread_id"))
	if err != nil {
		return err
	}
	sc := threadScope(t)
	p := &store.EventListParams{SessionID: sessionID, Scope: sc.scope, Thread: sc.thread, Limit: limit + 1}
	if c != nil {
		if c.Seq < 1 || c.ID != "" {
			return invalid("page", "invalid page token")
		}
		p.AfterSeq = c.Seq
	}
	return s.writeEventPage(w, r, p, limit)
}

// threadStream serves GET /v1/sessions/{session_id}/threads/{thread_id}/stream: the session's stream over the
// thread's own events.
func (s *Server) threadStream(w http.ResponseWriter, r *http.Request) error {
	t, err := s.thread(r.Context(), r.PathValue("session_id"), r.PathValue("thread_id"))
	if err != nil {
		return err
	}
	return s.stream(w, r, r.PathValue("session_id"), threadScope(t))
}
