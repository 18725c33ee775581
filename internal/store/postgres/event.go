package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// appendSQL appends events to one session in a single statement: it takes the session row lock while
// advancing last_seq (only if the lease and expected sequence conditions hold), inserts the events with the
// sequence numbers it reserved, and queues the wake-ups, which PostgreSQL delivers at commit. It returns no
// row when a condition failed or the session does not exist.
//
// $1 session id, $2 event count, $3 wake, $4 status, $5 usage, $6 active seconds, $7 lease token,
// $8 expected seq, $9 append time, $10-$13 event ids, types, data and processed flags, $14-$15 channels.
const appendSQL = `WITH s AS (
	UPDATE sessions SET
		last_seq = last_seq + $2,
		wake_seq = wake_seq + CASE WHEN $3 THEN 1 ELSE 0 END,
		woken_at = CASE WHEN $3 AND wake_seq <= handled_wake_seq THEN now() ELSE woken_at END,
		status = COALESCE($4, status),
		usage = COALESCE($5::json, usage),
		active_seconds = active_seconds + $6
	WHERE id = $1
		AND ($7::text IS NULL OR (lease_token = $7 AND lease_expires_at > now()))
		AND ($8::bigint <= 0 OR last_seq + 1 = $8)
	RETURNING last_seq
), ins AS (
	INSERT INTO events (session_id, seq, id, type, created_at, processed_at, data)
	SELECT $1, s.last_seq - $2 + e.ord, e.id, e.type, $9, CASE WHEN e.processed THEN $9::timestamptz END, e.data::json
	FROM s, unnest($10::text[], $11::text[], $12::text[], $13::bool[]) WITH ORDINALITY AS e (id, type, data, processed, ord)
)
SELECT s.last_seq, pg_notify($14, $1), CASE WHEN $3 THEN pg_notify($15, $1) END FROM s`

// appendReq is one EventAppend on its way through the appender.
type appendReq struct {
	ctx     context.Context
	p       *store.EventAppendParams
	args    []any
	events  []apitype.Event
	resp    chan appendResult
	created time.Time
}

// appendResult is the outcome of appendSQL: the session's new last_seq, or ok=false when a condition failed.
type appendResult struct {
	lastSeq int64
	ok      bool
	err     error
}

// newAppend prepares the arguments of appendSQL and the events it will create.
func (s *Store) newAppend(ctx context.Context, p *store.EventAppendParams) *appendReq {
	n := len(p.Events)
	now := apitype.Now()
	r := &appendReq{ctx: ctx, p: p, events: make([]apitype.Event, n), resp: make(chan appendResult, 1), created: now}
	ids, types, data, processed := make([]string, n), make([]string, n), make([]string, n), make([]bool, n)
	for i, ne := range p.Events {
		ev := apitype.Event{ID: apitype.NewID(apitype.PrefixEvent), Type: ne.Type, SessionID: p.SessionID, CreatedAt: now, Data: ne.Data}
		if len(ev.Data) == 0 {
			ev.Data = []byte("{}")
		}
		if ne.Processed {
			ev.ProcessedAt = &now
		}
		r.events[i] = ev
		ids[i], types[i], data[i], processed[i] = ev.ID, ev.Type, string(ev.Data), ne.Processed
	}
	var status, usage, token any
	if p.Status != "" {
		status = p.Status
	}
	if p.Usage != nil {
		b, _ := json.Marshal(p.Usage) // SessionUsage always encodes.
		usage = string(b)
	}
	if p.Lease != nil {
		token = p.Lease.Token
	}
	r.args = []any{p.SessionID, int64(n), p.Wake, status, usage, max(0, p.ActiveSeconds), token, p.ExpectedSeq, now,
		ids, types, data, processed, s.eventsChannel, s.runnableChannel}
	return r
}

// fill assigns the reserved sequence numbers to the request's events.
func (r *appendReq) fill(lastSeq int64) {
	first := lastSeq - int64(len(r.events)) + 1
	for i := range r.events {
		r.events[i].Seq = first + int64(i)
	}
}

// EventAppend appends events with contiguous sequence numbers, acknowledging them once committed.
func (s *Store) EventAppend(ctx context.Context, p *store.EventAppendParams) ([]apitype.Event, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	for i, e := range p.Events {
		if e.Type == "" {
			return nil, fmt.Errorf("event append: event %d has no type", i)
		}
	}
	r := s.newAppend(ctx, p)
	res := s.appender.do(ctx, r)
	if res.err != nil {
		return nil, dbErr("event append", res.err)
	}
	if !res.ok {
		return nil, dbErr("event append", s.whyRefused(ctx, p.SessionID, p.Lease))
	}
	r.fill(res.lastSeq)
	s.notifyLocal(p.SessionID, p.Wake)
	return r.events, nil
}

// whyRefused tells which condition of a fenced write on the session failed: ErrNotFound, ErrLeaseLost or,
// failing those, ErrConflict.
func (s *Store) whyRefused(ctx context.Context, sessionID string, lease *store.Lease) error {
	var (
		token *string
		live  bool
	)
	err := s.pool.QueryRow(ctx, `SELECT lease_token, COALESCE(lease_expires_at > now(), false) FROM sessions WHERE id = $1`,
		sessionID).Scan(&token, &live)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return store.ErrNotFound
	case err != nil:
		return err
	case lease != nil && (token == nil || *token != lease.Token || !live):
		return store.ErrLeaseLost
	}
	return fmt.Errorf("expected sequence number not next: %w", store.ErrConflict)
}

// notifyLocal wakes this process's subscribers at once; other processes hear the NOTIFY.
func (s *Store) notifyLocal(sessionID string, runnable bool) {
	s.hub.NotifySession(sessionID)
	if runnable {
		s.hub.NotifyRunnable()
	}
}

// EventList returns a slice of a session's log: one index range scan on (session_id, seq).
func (s *Store) EventList(ctx context.Context, p *store.EventListParams) ([]apitype.Event, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if p.Limit <= 0 {
		return nil, fmt.Errorf("event list: limit %d must be > 0", p.Limit)
	}
	var q query
	fmt.Fprintf(&q.sql, `SELECT seq, id, type, created_at, processed_at, data FROM events WHERE session_id = %s`, q.arg(p.SessionID))
	if p.AfterSeq > 0 {
		fmt.Fprintf(&q.sql, " AND seq > %s", q.arg(p.AfterSeq))
	}
	if p.BeforeSeq > 0 {
		fmt.Fprintf(&q.sql, " AND seq < %s", q.arg(p.BeforeSeq))
	}
	if len(p.Types) > 0 {
		fmt.Fprintf(&q.sql, " AND type = ANY(%s)", q.arg(p.Types))
	}
	for _, c := range []struct {
		op string
		t  *time.Time
	}{{">", p.CreatedAfter}, {">=", p.CreatedFrom}, {"<", p.CreatedBefore}, {"<=", p.CreatedTo}} {
		if c.t != nil {
			fmt.Fprintf(&q.sql, " AND created_at %s %s", c.op, q.arg(*c.t))
		}
	}
	if p.Desc {
		q.sql.WriteString(" ORDER BY seq DESC")
	} else {
		q.sql.WriteString(" ORDER BY seq")
	}
	fmt.Fprintf(&q.sql, " LIMIT %s", q.arg(p.Limit))
	rows, err := s.pool.Query(ctx, q.sql.String(), q.args...)
	if err != nil {
		return nil, dbErr("event list", err)
	}
	out := []apitype.Event{}
	var ev apitype.Event
	_, err = pgx.ForEachRow(rows, []any{&ev.Seq, &ev.ID, &ev.Type, &ev.CreatedAt, &ev.ProcessedAt, &ev.Data}, func() error {
		e := ev
		e.SessionID = p.SessionID
		e.CreatedAt = e.CreatedAt.UTC()
		e.ProcessedAt = utc(e.ProcessedAt)
		e.Data = append([]byte(nil), ev.Data...)
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, dbErr("event list", err)
	}
	if len(out) == 0 {
		if err := s.exists(ctx, "sessions", p.SessionID); err != nil {
			return nil, dbErr("event list", err)
		}
	}
	return out, nil
}

// EventGet returns one event of a session by its id.
func (s *Store) EventGet(ctx context.Context, sessionID, eventID string) (*apitype.Event, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ev := apitype.Event{SessionID: sessionID}
	err := s.pool.QueryRow(ctx, `SELECT seq, id, type, created_at, processed_at, data FROM events WHERE id = $1 AND session_id = $2`,
		eventID, sessionID).Scan(&ev.Seq, &ev.ID, &ev.Type, &ev.CreatedAt, &ev.ProcessedAt, &ev.Data)
	if err != nil {
		return nil, dbErr("event get", err)
	}
	ev.CreatedAt = ev.CreatedAt.UTC()
	ev.ProcessedAt = utc(ev.ProcessedAt)
	return &ev, nil
}

// EventMarkProcessed sets processed_at on the given client events that have none, fenced by the lease.
func (s *Store) EventMarkProcessed(ctx context.Context, p *store.EventMarkProcessedParams) error {
	if err := s.check(); err != nil {
		return err
	}
	var token any
	if p.Lease != nil {
		token = p.Lease.Token
	}
	at := p.At
	if at.IsZero() {
		at = apitype.Now()
	}
	var held int
	err := s.pool.QueryRow(ctx, `WITH s AS (
			SELECT id FROM sessions
			WHERE id = $1 AND ($2::text IS NULL OR (lease_token = $2 AND lease_expires_at > now()))
			FOR NO KEY UPDATE
		), u AS (
			UPDATE events e SET processed_at = $3 FROM s
			WHERE e.session_id = s.id AND e.seq = ANY($4) AND e.processed_at IS NULL
		)
		SELECT count(*), (SELECT pg_notify($5, id) FROM s) FROM s`, p.SessionID, token, at, p.Seqs, s.eventsChannel).Scan(&held, nil)
	if err == nil && held == 0 {
		err = s.whyRefused(ctx, p.SessionID, p.Lease)
	}
	if err != nil {
		return dbErr("event mark processed", err)
	}
	s.hub.NotifySession(p.SessionID)
	return nil
}
