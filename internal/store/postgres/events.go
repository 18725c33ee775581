package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// appendSQL appends events to several sessions in one statement, one request per session: for each request
// it takes the session row lock while advancing last_seq (only if the request's lease and expected sequence
// conditions hold), inserts the request's events with the sequence numbers it reserved, and queues the
// wake-ups, which PostgreSQL delivers at commit: one notification per channel, listing the session ids (so a
// round's ids must fit the 8000-byte payload). It returns a row (request index, new last_seq) for each request
// that was applied; a request without a row broke a condition or named no session.
//
// Requests: $1 index, $2 session id, $3 event count, $4 wake, $5 status, $6 usage, $7 active seconds,
// $8 lease token, $9 expected seq, $10 append time. Events: $11 request index, $12 position in the request,
// $13-$16 ids, types, data and processed flags. $17-$18 the events and runnable channels. Processed marks:
// $19 request index, $20 sequence number. $21 release the lease, $22 the wake count it handled. $23-$24 the
// events' threads and cross-post flags. $25 refuse a closed session (EventAppendParams.Open). A row's runnable column says whether the session is runnable after it
// (woken, or released with a newer wake-up).
//
// A round whose requests write threads (EventAppendParams.Threads) runs appendThreadsSQL: appendSQL with one
// more step, which writes them for the requests applied.
const appendSQL = appendHead + appendTail

// appendThreadsSQL is appendSQL writing threads too: $26 request index, $27-$35 the threads' ids, parents,
// statuses, usages, stats, creation, update and archive times, and documents. A stored thread takes the status,
// usage, stats and updated_at given and keeps the rest (store.KeepThread's rule).
const appendThreadsSQL = appendHead + threadsCTE + appendTail

// A round whose requests' events tell webhook events (store.LogWebhookEvents) records them in the outbox with one
// more step, wh: appendWebhooksSQL is appendSQL with it, appendThreadsWebhooksSQL appendThreadsSQL with it. Its
// arguments follow the others' (webhooksCTE), so that each statement numbers its arguments without a gap.
var (
	appendWebhooksSQL        = appendHead + webhooksCTE(26) + appendTail
	appendThreadsWebhooksSQL = appendHead + threadsCTE + webhooksCTE(36) + appendTail
)

const threadsCTE = `, th AS (
	INSERT INTO threads (session_id, id, parent_thread_id, status, usage, stats, created_at, updated_at,
		archived_at, doc)
	SELECT u.session_id, t.id, t.parent, t.status, t.usage::json, t.stats::json, t.created, t.updated,
		t.archived, t.doc::json
	FROM u JOIN unnest($26::int[], $27::text[], $28::text[], $29::text[], $30::text[], $31::text[],
		$32::timestamptz[], $33::timestamptz[], $34::timestamptz[], $35::text[])
		AS t (idx, id, parent, status, usage, stats, created, updated, archived, doc) ON t.idx = u.idx
	ON CONFLICT (session_id, id) DO UPDATE SET status = excluded.status, usage = excluded.usage,
		stats = excluded.stats, updated_at = excluded.updated_at
)`

// webhooksCTE is the step that records the webhook events of the requests applied, its arguments from $n: the
// request index, the events' ids, types, times and documents. An event recorded already is skipped, and none is
// recorded while no endpoint is enabled.
func webhooksCTE(n int) string {
	return fmt.Sprintf(`, wh AS (
	INSERT INTO webhook_events (id, type, created_at, doc)
	SELECT w.id, w.type, w.created, w.doc::json
	FROM u JOIN unnest($%d::int[], $%d::text[], $%d::text[], $%d::timestamptz[], $%d::text[])
		AS w (idx, id, type, created, doc) ON w.idx = u.idx
	WHERE `+anyEndpointEnabled+`
	ON CONFLICT (id) DO NOTHING
)`, n, n+1, n+2, n+3, n+4)
}

const appendHead = `WITH r AS (
	SELECT * FROM unnest($1::int[], $2::text[], $3::bigint[], $4::bool[], $5::text[], $6::text[], $7::float8[],
		$8::text[], $9::bigint[], $10::timestamptz[], $21::bool[], $22::bigint[], $25::bool[])
		AS r (idx, session_id, n, wake, status, usage, active, token, expected, created, release, handled, open)
), u AS (
	UPDATE sessions s SET
		last_seq = s.last_seq + r.n,
		wake_seq = s.wake_seq + CASE WHEN r.wake THEN 1 ELSE 0 END,
		woken_at = CASE WHEN r.wake AND s.wake_seq <= s.handled_wake_seq THEN now() ELSE s.woken_at END,
		status = CASE WHEN s.status = 'terminated' THEN s.status ELSE COALESCE(r.status, s.status) END,
		usage = COALESCE(r.usage::json, s.usage),
		active_seconds = s.active_seconds + r.active,
		lease_owner = CASE WHEN r.release THEN NULL ELSE s.lease_owner END,
		lease_token = CASE WHEN r.release THEN NULL ELSE s.lease_token END,
		lease_expires_at = CASE WHEN r.release THEN NULL ELSE s.lease_expires_at END,
		handled_wake_seq = CASE WHEN r.release THEN greatest(s.handled_wake_seq, r.handled) ELSE s.handled_wake_seq END
	FROM r
	WHERE s.id = r.session_id
		AND (r.token IS NULL OR (s.lease_token = r.token AND s.lease_expires_at > now()))
		AND (r.expected <= 0 OR s.last_seq + 1 = r.expected)
		AND (NOT r.open OR (s.archived_at IS NULL AND s.status <> 'terminated'))
	RETURNING r.idx, r.session_id, r.n, r.created, s.last_seq,
		r.wake OR (r.release AND s.wake_seq > s.handled_wake_seq) AS runnable
), ins AS (
	INSERT INTO events (session_id, seq, id, type, created_at, processed_at, data, thread_id, crosspost)
	SELECT u.session_id, u.last_seq - u.n + e.ord, e.id, e.type, u.created,
		CASE WHEN e.processed THEN u.created END, e.data::json, e.thread, e.crosspost
	FROM u JOIN unnest($11::int[], $12::bigint[], $13::text[], $14::text[], $15::text[], $16::bool[],
		$23::text[], $24::bool[])
		AS e (idx, ord, id, type, data, processed, thread, crosspost) ON e.idx = u.idx
), mp AS (
	UPDATE events e SET processed_at = u.created
	FROM u JOIN unnest($19::int[], $20::bigint[]) AS m (idx, seq) ON m.idx = u.idx
	WHERE e.session_id = u.session_id AND e.seq = m.seq AND e.processed_at IS NULL
)`

const appendTail = `
SELECT u.idx, u.last_seq, u.runnable,
	(SELECT pg_notify($17, string_agg(session_id, ',')) FROM u),
	(SELECT pg_notify($18, string_agg(session_id, ',')) FROM u WHERE runnable HAVING count(*) > 0)
FROM u`

// appendReq is one EventAppend on its way through the appender.
type appendReq struct {
	ctx    context.Context
	p      *store.EventAppendParams
	events []apitype.Event
	resp   chan appendResult

	created              time.Time
	status, usage, token *string
	threads              []threadRow
	// webhooks are the webhook events the events tell (store.LogWebhookEvents), recorded with them.
	webhooks []apitype.WebhookEvent
}

// appendResult is the outcome of an append: the session's new last_seq and whether it is runnable after it,
// or ok=false when a condition failed.
type appendResult struct {
	lastSeq  int64
	ok       bool
	runnable bool
	err      error
}

// newAppend prepares an append and the events it will create. The caller encodes p.Threads (threadRows).
func (s *Store) newAppend(ctx context.Context, p *store.EventAppendParams, threads []threadRow) *appendReq {
	now := apitype.Now()
	r := &appendReq{
		ctx: ctx, p: p, events: make([]apitype.Event, len(p.Events)), resp: make(chan appendResult, 1), created: now,
		threads: threads,
	}
	for i, ne := range p.Events {
		ev := apitype.Event{
			ID: cmp.Or(ne.ID, apitype.NewID(apitype.PrefixEvent)), Type: ne.Type, SessionID: p.SessionID, CreatedAt: now, Data: ne.Data,
			Thread: ne.Thread, CrossPost: ne.CrossPost,
		}
		if len(ev.Data) == 0 {
			ev.Data = []byte("{}")
		}
		if ne.Processed {
			ev.ProcessedAt = &now
		}
		r.events[i] = ev
	}
	r.webhooks = store.LogWebhookEvents(p.SessionID, r.events)
	if p.Status != "" {
		r.status = &p.Status
	}
	if p.Usage != nil {
		b, _ := json.Marshal(p.Usage) // SessionUsage always encodes.
		u := string(b)
		r.usage = &u
	}
	if p.Lease != nil {
		r.token = &p.Lease.Token
	}
	return r
}

// appendArgs returns the statement (appendSQL; appendThreadsSQL if a request writes threads; either with the
// webhooks step if a request's events tell webhook events) and its arguments for requests to distinct sessions.
func (s *Store) appendArgs(reqs []*appendReq) (string, []any) {
	n := len(reqs)
	var (
		idx, count, expected = make([]int32, n), make([]int64, n), make([]int64, n)
		sessionIDs           = make([]string, n)
		wake                 = make([]bool, n)
		status, usage, token = make([]*string, n), make([]*string, n), make([]*string, n)
		active               = make([]float64, n)
		created              = make([]time.Time, n)

		eIdx                []int32
		eOrd                []int64
		eIDs, eTypes, eData []string
		eProcessed          []bool
		eThreads            []string
		eCrossPosts         []bool
		threads             threadArgs
		mIdx                []int32
		mSeq                []int64
		release             = make([]bool, n)
		handled             = make([]int64, n)
		open                = make([]bool, n)
		webhooks            webhookArgs
	)
	for i, r := range reqs {
		idx[i], sessionIDs[i], count[i], wake[i] = int32(i), r.p.SessionID, int64(len(r.events)), r.p.Wake
		status[i], usage[i], active[i], token[i] = r.status, r.usage, max(0, r.p.ActiveSeconds), r.token
		expected[i], created[i], open[i] = r.p.ExpectedSeq, r.created, r.p.Open
		for j, ev := range r.events {
			eIdx = append(eIdx, int32(i))
			eOrd = append(eOrd, int64(j+1))
			eIDs = append(eIDs, ev.ID)
			eTypes = append(eTypes, string(ev.Type))
			eData = append(eData, string(ev.Data))
			eProcessed = append(eProcessed, ev.ProcessedAt != nil)
			eThreads = append(eThreads, ev.Thread)
			eCrossPosts = append(eCrossPosts, ev.CrossPost)
		}
		threads.add(int32(i), r.threads)
		webhooks.add(int32(i), r.webhooks)
		if r.p.Release {
			release[i], handled[i] = true, r.p.Lease.WakeSeq
		}
		for _, seq := range r.p.MarkProcessed {
			mIdx = append(mIdx, int32(i))
			mSeq = append(mSeq, seq)
		}
	}
	args := []any{idx, sessionIDs, count, wake, status, usage, active, token, expected, created,
		eIdx, eOrd, eIDs, eTypes, eData, eProcessed, s.eventsChannel, s.runnableChannel, mIdx, mSeq,
		release, handled, eThreads, eCrossPosts, open}
	switch {
	case len(threads.idx) == 0 && len(webhooks.idx) == 0:
		return appendSQL, args
	case len(webhooks.idx) == 0:
		return appendThreadsSQL, append(args, threads.args()...)
	case len(threads.idx) == 0:
		return appendWebhooksSQL, append(args, webhooks.args()...)
	}
	return appendThreadsWebhooksSQL, append(append(args, threads.args()...), webhooks.args()...)
}

// scanAppend reads appendSQL's rows into results, indexed like its requests.
func scanAppend(rows pgx.Rows, results []appendResult) error {
	var (
		idx      int32
		lastSeq  int64
		runnable bool
	)
	_, err := pgx.ForEachRow(rows, []any{&idx, &lastSeq, &runnable, nil, nil}, func() error {
		if idx < 0 || int(idx) >= len(results) {
			return fmt.Errorf("append: row for request %d of %d", idx, len(results))
		}
		results[idx] = appendResult{lastSeq: lastSeq, ok: true, runnable: runnable}
		return nil
	})
	return err
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
	if err := store.CheckEvents(p.Events); err != nil {
		return nil, fmt.Errorf("event append: %w", err)
	}
	if p.Release && p.Lease == nil {
		return nil, errors.New("event append: release without a lease")
	}
	threads, err := threadRows(p.SessionID, p.Threads)
	if err != nil {
		return nil, fmt.Errorf("event append: %w", err)
	}
	r := s.newAppend(ctx, p, threads)
	res := s.appender.do(ctx, r)
	if res.err != nil {
		return nil, s.dbErr("event append", res.err)
	}
	if !res.ok {
		return nil, s.dbErr("event append", s.whyRefused(ctx, p.SessionID, p.Lease, p.Open))
	}
	r.fill(res.lastSeq)
	s.notifyLocal(p.SessionID, res.runnable)
	return r.events, nil
}

// whyRefused tells which condition of a fenced write on the session failed: ErrNotFound, ErrSessionClosed (if
// the write required an open session), ErrLeaseLost or, failing those, ErrConflict.
func (s *Store) whyRefused(ctx context.Context, sessionID string, lease *store.Lease, open bool) error {
	var (
		token  *string
		live   bool
		closed bool
	)
	err := s.pool.QueryRow(ctx, `SELECT lease_token, COALESCE(lease_expires_at > now(), false),
		archived_at IS NOT NULL OR status = 'terminated' FROM sessions WHERE id = $1`, sessionID).Scan(&token, &live, &closed)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return store.ErrNotFound
	case err != nil:
		return err
	case open && closed:
		return store.ErrSessionClosed
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

// errPageFull stops EventList's scan at EventListParams.MaxBytes.
var errPageFull = errors.New("page full")

// eventColumns are the columns of an event, in the order EventList and EventGet scan them.
const eventColumns = `seq, id, type, created_at, processed_at, data, thread_id, crosspost`

// EventList returns a slice of a session's log: one index range scan on (session_id, seq).
func (s *Store) EventList(ctx context.Context, p *store.EventListParams) ([]apitype.Event, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if p.Limit <= 0 {
		return nil, fmt.Errorf("event list: limit %d must be > 0", p.Limit)
	}
	q := eventListQuery(p)
	rows, err := s.pool.Query(ctx, q.sql.String(), q.args...)
	if err != nil {
		return nil, s.dbErr("event list", err)
	}
	out := make([]apitype.Event, 0, min(p.Limit, 1000))
	var (
		ev   apitype.Event
		data []byte // scanned as bytes, a fresh copy per row: json.RawMessage would be re-validated
	)
	size := 0
	_, err = pgx.ForEachRow(rows, []any{&ev.Seq, &ev.ID, &ev.Type, &ev.CreatedAt, &ev.ProcessedAt, &data,
		&ev.Thread, &ev.CrossPost}, func() error {
		e := ev
		e.SessionID = p.SessionID
		e.CreatedAt = e.CreatedAt.UTC()
		e.ProcessedAt = utc(e.ProcessedAt)
		e.Data = data
		out = append(out, e)
		if size += len(data); p.MaxBytes > 0 && size >= p.MaxBytes {
			return errPageFull // the rows after it are discarded, not kept
		}
		return nil
	})
	if errors.Is(err, errPageFull) {
		err = nil
	}
	if err != nil {
		return nil, s.dbErr("event list", err)
	}
	if len(out) == 0 {
		if err := s.exists(ctx, "sessions", p.SessionID); err != nil {
			return nil, s.dbErr("event list", err)
		}
	}
	return out, nil
}

// eventListQuery selects p's slice of the log. Its conditions name only what p sets, so the plan is a range
// scan of the (session_id, seq) key whatever the statement cache holds (of events_thread for a child thread's
// events).
func eventListQuery(p *store.EventListParams) *query {
	q := &query{}
	fmt.Fprintf(&q.sql, `SELECT `+eventColumns+` FROM events WHERE session_id = %s`, q.arg(p.SessionID))
	switch {
	case p.Scope == store.ScopeSession:
		// Every event of a single-agent session matches: the plan stays the primary key's range scan.
		q.sql.WriteString(" AND (thread_id = '' OR crosspost)")
	case p.Scope == store.ScopeThread && p.Thread == "":
		q.sql.WriteString(" AND thread_id = ''")
	case p.Scope == store.ScopeThread:
		// The key of the partial index events_thread, which this implies its condition (see migration 0008).
		fmt.Fprintf(&q.sql, " AND NULLIF(thread_id, '') = %s", q.arg(p.Thread))
	}
	if p.AfterSeq > 0 {
		fmt.Fprintf(&q.sql, " AND seq > %s", q.arg(p.AfterSeq))
	}
	if p.BeforeSeq > 0 {
		fmt.Fprintf(&q.sql, " AND seq < %s", q.arg(p.BeforeSeq))
	}
	if len(p.Types) > 0 {
		fmt.Fprintf(&q.sql, " AND type = ANY(%s)", q.arg(eventTypeStrings(p.Types)))
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
	return q
}

// EventGet returns one event of a session by its id.
func (s *Store) EventGet(ctx context.Context, sessionID, eventID string) (*apitype.Event, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ev := apitype.Event{SessionID: sessionID}
	var data []byte
	err := s.pool.QueryRow(ctx, `SELECT `+eventColumns+` FROM events WHERE id = $1 AND session_id = $2`,
		eventID, sessionID).Scan(&ev.Seq, &ev.ID, &ev.Type, &ev.CreatedAt, &ev.ProcessedAt, &data, &ev.Thread, &ev.CrossPost)
	if err != nil {
		return nil, s.dbErr("event get", err)
	}
	ev.Data = data
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
		SELECT count(*), (SELECT pg_notify($5, id) FROM s) FROM s`,
		p.SessionID, token, at, p.Seqs, s.eventsChannel).Scan(&held, nil)
	if err == nil && held == 0 {
		err = s.whyRefused(ctx, p.SessionID, p.Lease, false)
	}
	if err != nil {
		return s.dbErr("event mark processed", err)
	}
	s.hub.NotifySession(p.SessionID)
	return nil
}

// Wakes counts the session's wake-ups in this process (see store.Hub.Wakes).
func (s *Store) Wakes(sessionID string) uint64 { return s.hub.Wakes(sessionID) }

// Subscribe returns a channel woken whenever the session may have new events, in this process or another.
func (s *Store) Subscribe(sessionID string) (<-chan struct{}, func()) {
	ch, stop := s.hub.Subscribe(sessionID)
	s.listener.track(sessionID)
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			stop()
			s.listener.untrack(sessionID)
		})
	}
}

// eventTypeStrings is types as the text[] the type column is compared with.
func eventTypeStrings(types []apitype.EventType) []string {
	out := make([]string, len(types))
	for i, t := range types {
		out[i] = string(t)
	}
	return out
}
