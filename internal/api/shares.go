package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// Shares are each workspace's fair shares of a server, so that one workspace cannot starve the others: 0 is no
// limit. A request over a share is a 429 with retry-after. On a store that many processes share (PostgreSQL),
// the request rate is one token bucket per workspace in the store (store.RateStore), so a fleet of API servers
// gives a workspace its rate, not its rate times the servers; on SQLite, one process's, the bucket is in
// memory. Running sessions are counted in the store, so in every process.
type Shares struct {
	// RequestRate is the requests a second a workspace's credentials may send, in bursts of twice as many.
	RequestRate float64
	// RunningSessions is how many of a workspace's sessions may run at once: a message that would start a
	// turn of one more is refused until one goes idle. Sessions starting at the same moment are counted as they
	// stand, so a burst can overshoot by the requests in flight.
	RunningSessions int
}

// runningRetry is the retry-after of a turn refused for the running-sessions share.
const runningRetry = 5 * time.Second

// tooMany is the 429 of a share, with its retry-after.
func tooMany(w http.ResponseWriter, wait time.Duration, format string, args ...any) error {
	secs := int(wait/time.Second) + 1
	w.Header().Set("retry-after", fmt.Sprint(secs))
	return &apiError{status: http.StatusTooManyRequests, typ: apitype.ErrRateLimit,
		msg: fmt.Sprintf(format, args...) + fmt.Sprintf("; retry in %d s", secs)}
}

// workspaceRate takes a token of the request's workspace's rate.
func (s *Server) workspaceRate(w http.ResponseWriter, r *http.Request, c *caller) error {
	rate := s.shares.RequestRate
	if rate <= 0 {
		return nil
	}
	burst := max(1, int(2*rate))
	key := "workspace:" + c.ws
	now := time.Now()
	var wait time.Duration
	if s.sharedRates {
		var err error
		if wait, err = s.store.RateTake(r.Context(), key, rate, burst, now); err != nil {
			return err
		}
	} else {
		if s.wsLimiter == nil {
			return nil
		}
		wait, _ = s.wsLimiter.allow(key, now)
	}
	if wait > 0 {
		return tooMany(w, wait, "workspace %s is over its share of %g requests a second", c.ws, rate)
	}
	return nil
}

// turnStarters are the events that start a turn of an idle session.
var turnStarters = []apitype.EventType{apitype.EventUserMessage, apitype.EventUserDefineOutcome}

// admitTurn refuses events that would start a turn of an idle session (sessionID; "" for a session being
// created with initial events) when its workspace already runs its share of sessions.
func (s *Server) admitTurn(ctx context.Context, w http.ResponseWriter, sessionID string, types []apitype.EventType) error {
	n := s.shares.RunningSessions
	if n <= 0 || !slices.ContainsFunc(types, func(t apitype.EventType) bool { return slices.Contains(turnStarters, t) }) {
		return nil
	}
	if sessionID != "" {
		st, err := s.store.SessionState(ctx, sessionID)
		if err != nil {
			return nil // the append says what is wrong with the session
		}
		if st.Status == apitype.StatusRunning || st.Status == apitype.StatusRescheduling {
			return nil // the events join the turn it runs
		}
	}
	ws := ctxWorkspace(ctx)
	running, err := s.store.SessionList(ctx, &store.SessionListParams{ListParams: store.ListParams{Limit: n, Workspace: ws},
		Statuses: []string{apitype.StatusRunning, apitype.StatusRescheduling}})
	if err != nil {
		return err
	}
	if len(running) >= n {
		return tooMany(w, runningRetry, "workspace %s runs %d sessions, its share", ws, len(running))
	}
	return nil
}
