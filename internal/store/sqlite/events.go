package sqlite

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// EventAppend appends events to a session's log; it returns once their transaction has committed durably.
func (s *Store) EventAppend(ctx context.Context, p *store.EventAppendParams) ([]apitype.Event, error) {
	if err := store.CheckEvents(p.Events); err != nil {
		return nil, fmt.Errorf("sqlite: append to session %s: %w", p.SessionID, err)
	}
	if p.Release && p.Lease == nil {
		return nil, fmt.Errorf("sqlite: append to session %s: release without a lease", p.SessionID)
	}
	threads, err := threadRows(p.SessionID, p.Threads)
	if err != nil {
		return nil, fmt.Errorf("sqlite: append to session %s: %w", p.SessionID, err)
	}
	var events []apitype.Event
	var runnable bool
	var offered offeredClaim
	err = s.submit(ctx, &writeReq{
		fn: func(w *wtx) error {
			var err error
			if events, runnable, err = appendEvents(w, p, threads); err != nil || !runnable || !p.Wake || p.Lease != nil {
				return err
			}
			return offered.claim(w, p.SessionID)
		},
		after: func() {
			s.recent.appended(p.SessionID, events)
			if len(events) > 0 {
				s.recent.processed(p.SessionID, p.MarkProcessed, events[0].CreatedAt)
			}
			s.hub.NotifySession(p.SessionID)
			if claimed := offered.committed(); runnable && !claimed {
				s.hub.NotifyRunnable()
			}
		},
		failed: offered.failed,
		// appendEvents checks every condition in its first statement, except that an id the caller gives may
		// already exist: such an append needs a savepoint of its own.
		checksFirst: !hasIDs(p.Events),
	})
	if isConstraint(err) {
		err = store.ErrConflict // a duplicate event id
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: append to session %s: %w", p.SessionID, err)
	}
	return events, nil
}

// appendEvents checks p's conditions, inserts its events, applies its session changes, writes its threads
// (threadRows of p.Threads) and records the webhook events they tell (store.LogWebhookEvents), in w's
// transaction, and reports whether the session is runnable after it (woken, or released with a wake-up it did
// not handle). Callers have checked p.Events with store.CheckEvents, outside the writer goroutine.
func appendEvents(w *wtx, p *store.EventAppendParams, threads []threadRow) ([]apitype.Event, bool, error) {
	now := apitype.Now()
	created := micros(now)
	n := int64(len(p.Events))
	var status, usage, token any
	if p.Status != "" {
		status = p.Status
	}
	if p.Usage != nil {
		b, err := json.Marshal(p.Usage)
		if err != nil {
			return nil, false, err
		}
		usage = b
	}
	if p.Lease != nil {
		token = p.Lease.Token
	}
	wake, release, handled, open := 0, 0, int64(0), 0
	if p.Wake {
		wake = 1
	}
	if p.Open {
		open = 1
	}
	if p.Release {
		release, handled = 1, p.Lease.WakeSeq
	}
	// One statement checks the conditions and applies the session's changes; only when it matches no row does a
	// second one find out which condition failed.
	var lastSeq int64
	var runnable bool
	err := w.queryRow(`UPDATE sessions SET
			last_seq = last_seq + ?1,
			woken_at = CASE WHEN ?2 = 1 AND wake_seq <= handled_wake_seq THEN ?3 ELSE woken_at END,
			wake_seq = wake_seq + ?2,
			status = CASE WHEN status = 'terminated' THEN status ELSE coalesce(?4, status) END,
			usage = coalesce(?5, usage),
			active_seconds = active_seconds + ?6,
			lease_owner = CASE WHEN ?10 = 1 THEN NULL ELSE lease_owner END,
			lease_token = CASE WHEN ?10 = 1 THEN NULL ELSE lease_token END,
			lease_expires_at = CASE WHEN ?10 = 1 THEN NULL ELSE lease_expires_at END,
			handled_wake_seq = CASE WHEN ?10 = 1 THEN max(handled_wake_seq, ?11) ELSE handled_wake_seq END
		WHERE id = ?7
			AND (?8 IS NULL OR (lease_token = ?8 AND lease_expires_at > ?3))
			AND (?9 = 0 OR last_seq + 1 = ?9)
			AND (?12 = 0 OR (archived_at IS NULL AND status <> 'terminated'))
		RETURNING last_seq, ?2 = 1 OR (?10 = 1 AND wake_seq > handled_wake_seq)`,
		n, wake, created, status, usage, max(p.ActiveSeconds, 0), p.SessionID, token, max(p.ExpectedSeq, 0),
		release, handled, open).
		Scan(&lastSeq, &runnable)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, appendFailure(w, p, now)
	}
	if err != nil {
		return nil, false, err
	}

	first := lastSeq - n + 1
	events := make([]apitype.Event, len(p.Events))
	for i, ne := range p.Events {
		data := ne.Data
		if len(data) == 0 {
			data = json.RawMessage("{}")
		}
		e := apitype.Event{
			ID:        ne.ID,
			Type:      ne.Type,
			SessionID: p.SessionID,
			Seq:       first + int64(i),
			CreatedAt: now,
			Data:      data,
			Thread:    ne.Thread,
			CrossPost: ne.CrossPost,
		}
		if e.ID == "" {
			e.ID = w.s.eventIDs.next(now)
		}
		var processed any
		if ne.Processed {
			at := now
			e.ProcessedAt = &at
			processed = created
		}
		if _, err := w.exec(`INSERT INTO events (session_id, seq, id, type, created_at, processed_at, data,
			thread_id, crosspost) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`, p.SessionID, e.Seq, e.ID, string(e.Type), created,
			processed, []byte(data), e.Thread, e.CrossPost); err != nil {
			return nil, false, err
		}
		events[i] = e
	}
	if err := putThreads(w, p.SessionID, threads); err != nil {
		return nil, false, err
	}
	// The webhook events the log events tell go to the outbox in their transaction (none for most appends).
	if wh := store.LogWebhookEvents(p.SessionID, events); len(wh) > 0 {
		if err := insertWebhookEvents(w, wh); err != nil {
			return nil, false, err
		}
	}
	for _, seq := range p.MarkProcessed {
		if _, err := w.exec(`UPDATE events SET processed_at = ?
			WHERE session_id = ? AND seq = ? AND processed_at IS NULL`, created, p.SessionID, seq); err != nil {
			return nil, false, err
		}
	}
	return events, runnable, nil
}

// hasIDs reports whether any of the events comes with its id.
func hasIDs(events []apitype.NewEvent) bool {
	for _, e := range events {
		if e.ID != "" {
			return true
		}
	}
	return false
}

// appendFailure says which condition of an append failed.
func appendFailure(w *wtx, p *store.EventAppendParams, now time.Time) error {
	var lastSeq int64
	var token, status sql.NullString
	var expires, archived sql.NullInt64
	err := w.queryRow(`SELECT last_seq, lease_token, lease_expires_at, status, archived_at FROM sessions WHERE id = ?`,
		p.SessionID).Scan(&lastSeq, &token, &expires, &status, &archived)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.ErrNotFound
	case err != nil:
		return err
	case p.Open && (archived.Valid || status.String == apitype.StatusTerminated):
		return store.ErrSessionClosed
	case p.Lease != nil && !leaseHeld(p.Lease, token, expires, now):
		return store.ErrLeaseLost
	case p.ExpectedSeq > 0 && p.ExpectedSeq != lastSeq+1:
		return fmt.Errorf("expected seq %d, next is %d: %w", p.ExpectedSeq, lastSeq+1, store.ErrConflict)
	}
	return errors.New("append matched no session row, yet every condition holds")
}

// eventIDs makes event ids of the shape apitype.NewID makes ("sevt_", "011C", 24 base58 characters), but
// time-ordered: 9 characters of a strictly increasing microsecond clock, then 15 random ones (about 88 bits). Its
// alphabet, apitype.Base58, is in ascending byte order, so fixed-width numbers in it sort as numbers.
// Appends then add to the right edge of the id index instead of a random page of it, which cuts the pages a
// group commit writes by about a quarter. Only the writer goroutine uses it.
type eventIDs struct{ last int64 }

func (g *eventIDs) next(now time.Time) string {
	t := max(now.UnixMicro(), g.last+1)
	g.last = t
	const prefix = apitype.PrefixEvent + "011C"
	var b [len(prefix) + 24]byte
	copy(b[:], prefix)
	for i := len(prefix) + 8; i >= len(prefix); i-- { // 58^9 > 7e15 µs: good until the year 2200
		b[i] = apitype.Base58[t%58]
		t /= 58
	}
	random := b[len(prefix)+9:]
	_, _ = rand.Read(random) // crypto/rand.Read never fails.
	for i, c := range random {
		random[i] = apitype.Base58[int(c)%len(apitype.Base58)]
	}
	return string(b[:])
}

// EventList returns a slice of a session's log: a range scan of the (session_id, seq) key (of events_thread for a
// child thread's events).
func (s *Store) EventList(ctx context.Context, p *store.EventListParams) ([]apitype.Event, error) {
	if p.Limit <= 0 {
		return nil, fmt.Errorf("sqlite: list events of %s: limit must be > 0", p.SessionID)
	}
	if p.BeforeSeq == 0 && !p.Desc &&
		p.CreatedAfter == nil && p.CreatedFrom == nil && p.CreatedBefore == nil && p.CreatedTo == nil {
		// Following a session: what was just appended is in memory.
		if events, ok := s.recent.after(p); ok {
			return events, nil
		}
	}
	query, args := eventListQuery(p)
	rows, err := s.readQuery(ctx, query, args...)
	if err != nil {
		return nil, s.readErr("list events of "+p.SessionID, err)
	}
	events, err := scanEvents(rows, p.SessionID, p.MaxBytes)
	if err != nil {
		return nil, s.readErr("list events of "+p.SessionID, err)
	}
	if len(events) == 0 {
		var one int
		err := s.readRow(ctx, `SELECT 1 FROM sessions WHERE id = ?`, p.SessionID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("sqlite: list events of %s: %w", p.SessionID, store.ErrNotFound)
		}
		if err != nil {
			return nil, s.readErr("list events of "+p.SessionID, err)
		}
	}
	return events, nil
}

// eventListQuery selects p's slice of the log (past what recent serves).
func eventListQuery(p *store.EventListParams) (string, []any) {
	var q strings.Builder
	child := p.Scope == store.ScopeThread && p.Thread != ""
	if child {
		// A child thread's events are a range of the partial index events_thread, whose condition the query
		// repeats as it is spelled there. Without statistics the planner would rather scan the primary key's
		// range, every thread's events, for the rows it does not have to look up.
		q.WriteString(`SELECT ` + eventColumns + ` FROM events INDEXED BY events_thread
			WHERE session_id = ? AND seq > ? AND thread_id = ? AND thread_id <> ''`)
	} else {
		q.WriteString(`SELECT ` + eventColumns + ` FROM events WHERE session_id = ? AND seq > ?`)
	}
	args := []any{p.SessionID, p.AfterSeq}
	switch {
	case child:
		args = append(args, p.Thread)
	case p.Scope == store.ScopeSession:
		// Every event of a single-agent session matches: the plan stays the primary key's range scan.
		q.WriteString(` AND (thread_id = '' OR crosspost)`)
	case p.Scope == store.ScopeThread:
		q.WriteString(` AND thread_id = ''`)
	}
	if p.BeforeSeq > 0 {
		q.WriteString(` AND seq < ?`)
		args = append(args, p.BeforeSeq)
	}
	if len(p.Types) > 0 {
		q.WriteString(` AND type IN (` + placeholders(len(p.Types)) + `)`)
		for _, t := range p.Types {
			args = append(args, string(t))
		}
	}
	for _, tf := range []struct {
		op string
		t  *time.Time
	}{{">", p.CreatedAfter}, {">=", p.CreatedFrom}, {"<", p.CreatedBefore}, {"<=", p.CreatedTo}} {
		if tf.t != nil {
			q.WriteString(` AND created_at ` + tf.op + ` ?`)
			args = append(args, micros(*tf.t))
		}
	}
	if p.Desc {
		q.WriteString(` ORDER BY seq DESC LIMIT ?`)
	} else {
		q.WriteString(` ORDER BY seq LIMIT ?`)
	}
	args = append(args, p.Limit)
	return q.String(), args
}

// EventGet returns one event of a session by its id.
func (s *Store) EventGet(ctx context.Context, sessionID, eventID string) (*apitype.Event, error) {
	rows, err := s.readQuery(ctx, `SELECT `+eventColumns+` FROM events WHERE id = ? AND session_id = ?`,
		eventID, sessionID)
	if err != nil {
		return nil, s.readErr("get event "+eventID, err)
	}
	events, err := scanEvents(rows, sessionID, 0)
	if err != nil {
		return nil, s.readErr("get event "+eventID, err)
	}
	if len(events) == 0 {
		return nil, fmt.Errorf("sqlite: get event %s of session %s: %w", eventID, sessionID, store.ErrNotFound)
	}
	return &events[0], nil
}

const eventColumns = `seq, id, type, created_at, processed_at, data, thread_id, crosspost`

// inScope reports whether e is in the scope of p (store.EventListParams.Scope), as EventList's SQL does.
func inScope(p *store.EventListParams, e *apitype.Event) bool {
	switch p.Scope {
	case store.ScopeSession:
		return e.Thread == "" || e.CrossPost
	case store.ScopeThread:
		return e.Thread == p.Thread
	}
	return true
}

// scanEvents reads the events of rows, stopping after the one that brings their data to maxBytes if
// maxBytes > 0.
func scanEvents(rows *sql.Rows, sessionID string, maxBytes int) ([]apitype.Event, error) {
	defer rows.Close()
	events := []apitype.Event{}
	size := 0
	for (maxBytes <= 0 || size < maxBytes) && rows.Next() {
		e := apitype.Event{SessionID: sessionID}
		var created int64
		var processed sql.NullInt64
		var data []byte
		if err := rows.Scan(&e.Seq, &e.ID, &e.Type, &created, &processed, &data, &e.Thread, &e.CrossPost); err != nil {
			return nil, err
		}
		e.CreatedAt = fromMicros(created)
		e.ProcessedAt = timePtr(processed)
		e.Data = data
		events = append(events, e)
		size += len(data)
	}
	return events, rows.Err()
}

// EventMarkProcessed sets processed_at on the given events that have none, fenced by the lease if given.
func (s *Store) EventMarkProcessed(ctx context.Context, p *store.EventMarkProcessedParams) error {
	at := p.At
	if at.IsZero() {
		at = apitype.Now()
	}
	err := s.write(ctx, func(w *wtx) error {
		var token sql.NullString
		var expires sql.NullInt64
		err := w.queryRow(`SELECT lease_token, lease_expires_at FROM sessions WHERE id = ?`, p.SessionID).
			Scan(&token, &expires)
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		if p.Lease != nil && !leaseHeld(p.Lease, token, expires, time.Now()) {
			return store.ErrLeaseLost
		}
		for _, seq := range p.Seqs {
			if _, err := w.exec(`UPDATE events SET processed_at = ?
				WHERE session_id = ? AND seq = ? AND processed_at IS NULL`, micros(at), p.SessionID, seq); err != nil {
				return err
			}
		}
		return nil
	}, func() {
		s.recent.processed(p.SessionID, p.Seqs, fromMicros(micros(at)))
		s.hub.NotifySession(p.SessionID)
	})
	if err != nil {
		return fmt.Errorf("sqlite: mark events of %s processed: %w", p.SessionID, err)
	}
	return nil
}

// Wakes counts the session's wake-ups in this process (see store.Hub.Wakes).
func (s *Store) Wakes(sessionID string) uint64 { return s.hub.Wakes(sessionID) }

// Subscribe returns a channel woken after every append to the session through this Store. While it lasts, the
// session's newest events are kept in memory for EventList (see recent).
func (s *Store) Subscribe(sessionID string) (<-chan struct{}, func()) {
	ch, stop := s.hub.Subscribe(sessionID)
	unfollow := s.recent.follow(sessionID)
	return ch, func() { stop(); unfollow() }
}
