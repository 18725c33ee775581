package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// The work queue of self-hosted environments (spec §2.3). Who may call which of its endpoints is in auth.go.
const (
	maxBlockMS      = 999
	defaultReclaim  = 5 * time.Second
	maxWorkLeaseTTL = time.Hour
	maxWorkerIDLen  = 256
	pollersWindow   = 30 * time.Second
	// maxTrackedPollers bounds the memory workers_polling takes, whatever a flood of worker ids does.
	maxTrackedPollers = 65536
)

// selfHostedEnv returns the path's environment if it is a self-hosted one.
func (s *Server) selfHostedEnv(r *http.Request) (*apitype.Environment, error) {
	id := r.PathValue("environment_id")
	e, err := s.store.EnvironmentGet(r.Context(), id)
	if err != nil {
		return nil, lookup(err, "environment", id)
	}
	if e.Config.Type != apitype.EnvironmentSelfHosted {
		return nil, invalid("environment_id", "environment %s is not self_hosted: it has no work queue", id)
	}
	return e, nil
}

// msParam parses an optional integer parameter in [lo, hi]; ok is false when it is absent.
func msParam(q query, key string, lo, hi int) (int, bool, error) {
	v := q.str(key)
	if v == "" {
		return 0, false, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, false, invalid(key, "must be an integer between %d and %d", lo, hi)
	}
	return n, true, nil
}

// workPoll serves GET .../work/poll: the oldest deliverable item with its secret, or null. With block_ms it
// waits for one that long; the wait holds only the request's own goroutine and a Hub subscription (a channel),
// no database connection: the store is asked again when the Hub says work may be there, or at the end.
func (s *Server) workPoll(w http.ResponseWriter, r *http.Request) error {
	q := newQuery(r.URL)
	block, _, err := msParam(q, "block_ms", 1, maxBlockMS)
	if err != nil {
		return err
	}
	reclaim := defaultReclaim
	if ms, ok, err := msParam(q, "reclaim_older_than_ms", 0, 24*3600*1000); err != nil {
		return err
	} else if ok {
		reclaim = time.Duration(ms) * time.Millisecond
	}
	worker := r.Header.Get("Anthropic-Worker-ID")
	if err := checkString("Anthropic-Worker-ID", worker, false, maxWorkerIDLen); err != nil {
		return err
	}
	e, err := s.selfHostedEnv(r)
	if err != nil {
		return err
	}
	if worker != "" {
		s.workers.seen(e.ID, worker, time.Now())
	}
	wake, stop := s.store.WaitWork(e.ID)
	defer stop()
	var deadline <-chan time.Time
	if block > 0 {
		t := time.NewTimer(time.Duration(block) * time.Millisecond)
		defer t.Stop()
		deadline = t.C
	}
	for {
		token := apitype.NewSessionsToken()
		wk, err := s.store.WorkPoll(r.Context(), &store.WorkPollParams{EnvironmentID: e.ID, WorkerID: worker,
			ReclaimAfter: reclaim, TokenHash: apitype.HashAPIKey(token), KeyID: envKeyID(r.Context()), At: s.now()})
		if err == nil {
			secret := apitype.WorkSecret(token)
			wk.Secret = &secret
			return writeJSON(w, http.StatusOK, wk)
		}
		if !errors.Is(err, store.ErrNoWork) {
			return err
		}
		if deadline == nil {
			return writeJSON(w, http.StatusOK, nil)
		}
		select {
		case <-wake:
		case <-deadline:
			return writeJSON(w, http.StatusOK, nil)
		case <-r.Context().Done():
			return r.Context().Err()
		}
	}
}

func (s *Server) workAck(w http.ResponseWriter, r *http.Request) error {
	env, id := r.PathValue("environment_id"), r.PathValue("work_id")
	wk, err := s.store.WorkAck(r.Context(), &store.WorkAckParams{EnvironmentID: env, WorkID: id, TTL: s.workTTL, At: s.now()})
	switch {
	case errors.Is(err, store.ErrConflict):
		return conflict("work %s cannot be acked: it was acked already, stopped, or not delivered by a poll", id)
	case err != nil:
		return lookup(err, "work", id)
	}
	return writeJSON(w, http.StatusOK, wk)
}

func (s *Server) workHeartbeat(w http.ResponseWriter, r *http.Request) error {
	env, id := r.PathValue("environment_id"), r.PathValue("work_id")
	q := newQuery(r.URL)
	ttl := s.workTTL
	if n, ok, err := msParam(q, "desired_ttl_seconds", 1, int(maxWorkLeaseTTL/time.Second)); err != nil {
		return err
	} else if ok {
		ttl = time.Duration(n) * time.Second
	}
	expected := q.str("expected_last_heartbeat")
	if expected == apitype.NoHeartbeat {
		expected = ""
	}
	hb, err := s.store.WorkHeartbeat(r.Context(), &store.WorkHeartbeatParams{EnvironmentID: env, WorkID: id,
		Expected: expected, TTL: ttl, At: s.now()})
	if errors.Is(err, store.ErrConflict) && hb != nil {
		return &apiError{status: http.StatusPreconditionFailed, typ: apitype.ErrInvalidRequest,
			msg:  fmt.Sprintf("heartbeat precondition failed: work %s is %s and its last heartbeat is %q", id, hb.State, hb.LastHeartbeat),
			code: "heartbeat_precondition_failed",
			details: map[string]any{"current_state": map[string]any{"last_heartbeat": nullIfEmpty(hb.LastHeartbeat),
				"lease_extended": false, "state": hb.State, "ttl_seconds": hb.TTLSeconds}}}
	}
	if err != nil {
		return lookup(err, "work", id)
	}
	return writeJSON(w, http.StatusOK, hb)
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

type workStopRequest struct {
	Force *bool `json:"force"`
}

func (s *Server) workStop(w http.ResponseWriter, r *http.Request) error {
	env, id := r.PathValue("environment_id"), r.PathValue("work_id")
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var req workStopRequest
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := decodeJSON(body, &req); err != nil {
			return err
		}
	}
	wk, err := s.store.WorkStop(r.Context(), &store.WorkStopParams{EnvironmentID: env, WorkID: id,
		Force: req.Force != nil && *req.Force, At: s.now()})
	if errors.Is(err, store.ErrConflict) {
		return conflict("work %s is already stopped", id)
	}
	if err != nil {
		return lookup(err, "work", id)
	}
	return writeJSON(w, http.StatusOK, wk)
}

func (s *Server) workGet(w http.ResponseWriter, r *http.Request) error {
	env, id := r.PathValue("environment_id"), r.PathValue("work_id")
	wk, err := s.store.WorkGet(r.Context(), env, id)
	if err != nil {
		return lookup(err, "work", id)
	}
	return writeJSON(w, http.StatusOK, wk)
}

type workUpdateRequest struct {
	Metadata *map[string]*string `json:"metadata"`
}

func (s *Server) workUpdate(w http.ResponseWriter, r *http.Request) error {
	env, id := r.PathValue("environment_id"), r.PathValue("work_id")
	var req workUpdateRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	if req.Metadata == nil {
		return invalid("metadata", "required")
	}
	// Checked in the store's transaction: two concurrent patches cannot together exceed the limits.
	wk, err := s.store.WorkUpdateMetadata(r.Context(), env, id, func(cur map[string]string) (map[string]string, error) {
		md, err := patchMetadata("metadata", cur, *req.Metadata)
		if err != nil {
			return nil, &apiError{status: http.StatusBadRequest, typ: apitype.ErrInvalidRequest, msg: err.Error(), code: "invalid_metadata"}
		}
		return md, nil
	})
	if err != nil {
		return lookup(err, "work", id)
	}
	return writeJSON(w, http.StatusOK, wk)
}

func (s *Server) workList(w http.ResponseWriter, r *http.Request) error {
	env := r.PathValue("environment_id")
	q := newQuery(r.URL)
	limit, err := q.limit(defaultLimit, maxLimit)
	if err != nil {
		return err
	}
	c, err := q.page()
	if err != nil {
		return err
	}
	if _, err := s.selfHostedEnv(r); err != nil {
		return err
	}
	data, next, _, err := listByCreated(store.ListParams{}, limit, c, false,
		func(p *store.ListParams) ([]apitype.Work, error) { return s.store.WorkList(r.Context(), env, p) },
		func(wk *apitype.Work) (time.Time, string) { return wk.CreatedAt, wk.ID })
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, listPage[apitype.Work]{Data: data, NextPage: next})
}

func (s *Server) workStats(w http.ResponseWriter, r *http.Request) error {
	e, err := s.selfHostedEnv(r)
	if err != nil {
		return err
	}
	st, err := s.store.WorkStats(r.Context(), e.ID)
	if err != nil {
		return err
	}
	st.WorkersPolling = s.workers.count(e.ID, time.Now())
	return writeJSON(w, http.StatusOK, st)
}

// pollers remembers which workers polled each environment lately (for workers_polling), in bounded memory.
// It is this server's view: behind a load balancer, each server counts the workers that polled it.
type pollers struct {
	mu   sync.Mutex
	last map[string]map[string]time.Time // environment -> worker -> last poll
	n    int
}

func newPollers() *pollers { return &pollers{last: map[string]map[string]time.Time{}} }

func (p *pollers) seen(env, worker string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ws := p.last[env]
	if ws == nil {
		ws = map[string]time.Time{}
		p.last[env] = ws
	}
	if _, ok := ws[worker]; !ok {
		if p.n >= maxTrackedPollers {
			p.prune(now)
			if p.n >= maxTrackedPollers {
				return
			}
		}
		p.n++
	}
	ws[worker] = now
}

// prune forgets the workers that have not polled within the window.
func (p *pollers) prune(now time.Time) {
	for env, ws := range p.last {
		for w, t := range ws {
			if now.Sub(t) > pollersWindow {
				delete(ws, w)
				p.n--
			}
		}
		if len(ws) == 0 {
			delete(p.last, env)
		}
	}
}

func (p *pollers) count(env string, now time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, t := range p.last[env] {
		if now.Sub(t) <= pollersWindow {
			n++
		}
	}
	return n
}
