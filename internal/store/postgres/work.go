package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

const workColumns = `id, environment_id, session_id, state, metadata, created_at, acknowledged_at, started_at,
	latest_heartbeat_at, stop_requested_at, stopped_at, worker_id, polled_at, lease_expires_at, ttl_seconds,
	coalesce(token_hash, ''), held, lost_seq`

// workLeased is the condition of an item a worker holds by its lease.
const workLeased = `state IN ('starting', 'active', 'stopping')`

// WorkEnsure returns the session's item that is not stopping or stopped, queuing one when there is none. The
// session's row is locked for it, so two brains cannot queue two items.
func (s *Store) WorkEnsure(ctx context.Context, p *store.WorkEnsureParams) (*apitype.Work, bool, error) {
	var out *apitype.Work
	var created bool
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		out, created = nil, false
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE`, p.SessionID).Scan(&one); err != nil {
			return err
		}
		cur, err := scanWork(tx.QueryRow(ctx, `SELECT `+workColumns+` FROM work_items
			WHERE session_id = $1 AND state IN ('queued', 'starting', 'active') ORDER BY created_at DESC LIMIT 1`, p.SessionID))
		if err == nil {
			out = cur
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO work_items (id, environment_id, session_id, state, metadata, created_at)
			VALUES ($1, $2, $3, 'queued', '{}', $4)`, p.ID, p.EnvironmentID, p.SessionID, p.At); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, s.eventsChannel, store.WorkKey(p.EnvironmentID)); err != nil {
			return err
		}
		out, created = txWork(ctx, tx, p.EnvironmentID, p.ID)
		return nil
	})
	if err != nil {
		return nil, false, s.dbErr("work ensure", err)
	}
	if created {
		s.hub.NotifySession(store.WorkKey(p.EnvironmentID))
	}
	return out, created, nil
}

func txWork(ctx context.Context, tx pgx.Tx, envID, id string) (*apitype.Work, bool) {
	w, err := scanWork(tx.QueryRow(ctx, `SELECT `+workColumns+` FROM work_items WHERE environment_id = $1 AND id = $2`, envID, id))
	return w, err == nil
}

// WorkPoll re-queues the environment's items whose lease expired and delivers the oldest deliverable one; an
// item another poller is taking is skipped, not waited for.
func (s *Store) WorkPoll(ctx context.Context, p *store.WorkPollParams) (*apitype.Work, error) {
	reclaim := p.At.Add(-p.ReclaimAfter)
	if err := s.check(); err != nil {
		return nil, err
	}
	// Workers poll: look first, so that a poll with nothing to deliver or reclaim is one read, not a write.
	var found bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM work_items WHERE environment_id = $1 AND state <> 'stopped'
		AND ((state = 'queued' AND NOT held AND (polled_at IS NULL OR polled_at <= $2))
			OR (`+workLeased+` AND lease_expires_at <= $3)))`, p.EnvironmentID, reclaim, p.At).Scan(&found); err != nil {
		return nil, s.dbErr("work poll", err)
	}
	if !found {
		return nil, s.dbErr("work poll", store.ErrNoWork)
	}
	var out *apitype.Work
	var woken []string
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		out, woken = nil, nil
		rows, err := tx.Query(ctx, `WITH expired AS (
				SELECT w.id, w.state, w.session_id FROM work_items w
				WHERE w.environment_id = $1 AND w.`+workLeased+` AND w.lease_expires_at <= $2
				FOR UPDATE SKIP LOCKED
			), moved AS (
				UPDATE work_items w SET
					state = CASE WHEN e.state = 'stopping' THEN 'stopped' ELSE 'queued' END,
					held = e.state <> 'stopping',
					stopped_at = CASE WHEN e.state = 'stopping' THEN $2 ELSE w.stopped_at END,
					worker_id = CASE WHEN e.state = 'stopping' THEN w.worker_id ELSE '' END,
					polled_at = CASE WHEN e.state = 'stopping' THEN w.polled_at END,
					acknowledged_at = CASE WHEN e.state = 'stopping' THEN w.acknowledged_at END,
					started_at = CASE WHEN e.state = 'stopping' THEN w.started_at END,
					latest_heartbeat_at = CASE WHEN e.state = 'stopping' THEN w.latest_heartbeat_at END,
					lease_expires_at = NULL, token_hash = NULL,
					lost_seq = GREATEST(w.lost_seq, (SELECT last_seq FROM sessions WHERE id = e.session_id))
				FROM expired e WHERE w.id = e.id
				RETURNING w.session_id
			), woken AS (
				UPDATE sessions s SET woken_at = CASE WHEN s.wake_seq <= s.handled_wake_seq THEN now() ELSE s.woken_at END,
					wake_seq = s.wake_seq + 1
				FROM moved m WHERE s.id = m.session_id
				RETURNING s.id
			)
			SELECT id, pg_notify($3, id) FROM woken`, p.EnvironmentID, p.At, s.runnableChannel)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id, nil); err != nil {
				rows.Close()
				return err
			}
			woken = append(woken, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		var id string
		err = tx.QueryRow(ctx, `UPDATE work_items SET polled_at = $3, worker_id = $4, token_hash = $5, key_id = $6
			WHERE id = (SELECT id FROM work_items WHERE environment_id = $1 AND state = 'queued' AND NOT held
				AND (polled_at IS NULL OR polled_at <= $2) ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
			RETURNING id`, p.EnvironmentID, reclaim, p.At, p.WorkerID, p.TokenHash, p.KeyID).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		out, _ = txWork(ctx, tx, p.EnvironmentID, id)
		return nil
	})
	if err != nil {
		return nil, s.dbErr("work poll", err)
	}
	for _, id := range woken {
		s.hub.NotifySession(id)
	}
	if len(woken) > 0 {
		s.hub.NotifyRunnable()
	}
	if out == nil {
		return nil, s.dbErr("work poll", store.ErrNoWork)
	}
	return out, nil
}

// WorkAck moves a delivered, queued item to starting.
func (s *Store) WorkAck(ctx context.Context, p *store.WorkAckParams) (*apitype.Work, error) {
	if err := store.CheckWorkTTL(p.TTL); err != nil {
		return nil, s.dbErr("work ack", err)
	}
	var out *apitype.Work
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE work_items SET state = 'starting', acknowledged_at = $1, lease_expires_at = $2,
			ttl_seconds = $3 WHERE environment_id = $4 AND id = $5 AND state = 'queued' AND NOT held AND polled_at IS NOT NULL`,
			p.At, p.At.Add(p.TTL), int(p.TTL/time.Second), p.EnvironmentID, p.WorkID)
		if err != nil {
			return err
		}
		var ok bool
		if out, ok = txWork(ctx, tx, p.EnvironmentID, p.WorkID); !ok {
			return store.ErrNotFound
		}
		if tag.RowsAffected() == 0 {
			return store.ErrConflict
		}
		return nil
	})
	if err != nil {
		return nil, s.dbErr("work ack", err)
	}
	return out, nil
}

// lockWork reads an item for update.
func lockWork(ctx context.Context, tx pgx.Tx, envID, id string) (*apitype.Work, error) {
	w, err := scanWork(tx.QueryRow(ctx, `SELECT `+workColumns+` FROM work_items WHERE environment_id = $1 AND id = $2
		FOR UPDATE`, envID, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	return w, err
}

// WorkHeartbeat extends the holder's lease.
func (s *Store) WorkHeartbeat(ctx context.Context, p *store.WorkHeartbeatParams) (*apitype.WorkHeartbeat, error) {
	if err := store.CheckWorkTTL(p.TTL); err != nil {
		return nil, s.dbErr("work heartbeat", err)
	}
	var hb *apitype.WorkHeartbeat
	var cond error
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		hb, cond = nil, nil
		cur, err := lockWork(ctx, tx, p.EnvironmentID, p.WorkID)
		if err != nil {
			return err
		}
		hb, cond = store.Heartbeat(cur, p)
		if cond != nil || !hb.LeaseExtended {
			return nil
		}
		_, err = tx.Exec(ctx, `UPDATE work_items SET state = 'active', started_at = coalesce(started_at, $1),
			latest_heartbeat_at = $1, lease_expires_at = $2, ttl_seconds = $3 WHERE id = $4`,
			p.At.UTC().Truncate(time.Microsecond), p.At.Add(p.TTL), hb.TTLSeconds, p.WorkID)
		return err
	})
	if err != nil {
		return nil, s.dbErr("work heartbeat", err)
	}
	if cond != nil {
		return hb, s.dbErr("work heartbeat", cond)
	}
	return hb, nil
}

// WorkStop stops an item, or asks its holder to.
func (s *Store) WorkStop(ctx context.Context, p *store.WorkStopParams) (*apitype.Work, error) {
	var out *apitype.Work
	var woke string
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		out, woke = nil, ""
		cur, err := lockWork(ctx, tx, p.EnvironmentID, p.WorkID)
		if err != nil {
			return err
		}
		next, acked, err := store.StopTransition(cur, p.Force)
		if err != nil {
			return err
		}
		if next == apitype.WorkStopping {
			_, err = tx.Exec(ctx, `UPDATE work_items SET state = 'stopping', stop_requested_at = coalesce(stop_requested_at, $1)
				WHERE id = $2`, p.At, p.WorkID)
		} else {
			_, err = tx.Exec(ctx, `UPDATE work_items SET state = 'stopped', stop_requested_at = coalesce(stop_requested_at, $1),
				stopped_at = $1, lease_expires_at = NULL, token_hash = NULL, held = false,
				lost_seq = CASE WHEN $2 THEN GREATEST(lost_seq, (SELECT last_seq FROM sessions WHERE id = $3)) ELSE lost_seq END
				WHERE id = $4`, p.At, acked, cur.Data.ID, p.WorkID)
			if err == nil {
				_, err = tx.Exec(ctx, `WITH w AS (UPDATE sessions SET
						woken_at = CASE WHEN wake_seq <= handled_wake_seq THEN now() ELSE woken_at END,
						wake_seq = wake_seq + 1 WHERE id = $1 RETURNING id)
					SELECT pg_notify($2, id) FROM w`, cur.Data.ID, s.runnableChannel)
				woke = cur.Data.ID
			}
		}
		if err != nil {
			return err
		}
		out, _ = txWork(ctx, tx, p.EnvironmentID, p.WorkID)
		return nil
	})
	if err != nil {
		return nil, s.dbErr("work stop", err)
	}
	if woke != "" {
		s.hub.NotifySession(woke)
		s.hub.NotifyRunnable()
	}
	return out, nil
}

// WorkResume makes a held item deliverable again.
func (s *Store) WorkResume(ctx context.Context, environmentID, workID string) error {
	if err := s.check(); err != nil {
		return err
	}
	var n int64
	err := s.pool.QueryRow(ctx, `WITH r AS (UPDATE work_items SET held = false WHERE environment_id = $1 AND id = $2 RETURNING id)
		SELECT count(*), CASE WHEN count(*) > 0 THEN pg_notify($3, $4) END FROM r`,
		environmentID, workID, s.eventsChannel, store.WorkKey(environmentID)).Scan(&n, nil)
	if err == nil && n == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return s.dbErr("work resume", err)
	}
	s.hub.NotifySession(store.WorkKey(environmentID))
	return nil
}

// WorkGet returns an item of the environment.
func (s *Store) WorkGet(ctx context.Context, environmentID, workID string) (*apitype.Work, error) {
	return s.workRead(ctx, "work get", `SELECT `+workColumns+` FROM work_items WHERE environment_id = $1 AND id = $2`,
		environmentID, workID)
}

// WorkBySession returns the session's newest item.
func (s *Store) WorkBySession(ctx context.Context, sessionID string) (*apitype.Work, error) {
	return s.workRead(ctx, "work by session", `SELECT `+workColumns+` FROM work_items WHERE session_id = $1
		ORDER BY created_at DESC, id DESC LIMIT 1`, sessionID)
}

// WorkByTokenHash returns the item whose current sessions token has this hash.
func (s *Store) WorkByTokenHash(ctx context.Context, hash string) (*apitype.Work, error) {
	return s.workRead(ctx, "work by token", `SELECT `+workColumns+` FROM work_items WHERE token_hash = $1`, hash)
}

func (s *Store) workRead(ctx context.Context, op, q string, args ...any) (*apitype.Work, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	w, err := scanWork(s.pool.QueryRow(ctx, q, args...))
	if err != nil {
		return nil, s.dbErr(op, err)
	}
	return w, nil
}

// WorkUpdateMetadata sets an item's metadata to fn's answer, in the write's transaction.
func (s *Store) WorkUpdateMetadata(ctx context.Context, environmentID, workID string, fn func(map[string]string) (map[string]string, error)) (*apitype.Work, error) {
	var out *apitype.Work
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		cur, err := lockWork(ctx, tx, environmentID, workID)
		if err != nil {
			return err
		}
		next, err := fn(maps.Clone(cur.Metadata))
		if err != nil {
			return err
		}
		if next == nil {
			next = map[string]string{}
		}
		cur.Metadata = next
		md, err := json.Marshal(next)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE work_items SET metadata = $1 WHERE id = $2`, md, workID); err != nil {
			return err
		}
		out = cur
		return nil
	})
	if err != nil {
		return nil, s.dbErr("work update", err)
	}
	return out, nil
}

// WorkList lists the environment's items.
func (s *Store) WorkList(ctx context.Context, environmentID string, p *store.ListParams) ([]apitype.Work, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	q := &query{}
	q.sql.WriteString(`SELECT ` + workColumns + ` FROM work_items w WHERE w.environment_id = ` + q.arg(environmentID))
	lp := store.ListParams{Limit: p.Limit, After: p.After, Desc: p.Desc}
	q.listFilter(&lp, "w", false)
	rows, err := s.pool.Query(ctx, q.sql.String(), q.args...)
	if err != nil {
		return nil, s.dbErr("work list", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (apitype.Work, error) {
		w, err := scanWork(row)
		if err != nil {
			return apitype.Work{}, err
		}
		return *w, nil
	})
	if err != nil {
		return nil, s.dbErr("work list", err)
	}
	if out == nil {
		out = []apitype.Work{}
	}
	return out, nil
}

// WorkStats counts the environment's queue.
func (s *Store) WorkStats(ctx context.Context, environmentID string) (*apitype.WorkQueueStats, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	st := &apitype.WorkQueueStats{Type: apitype.ObjectWorkQueueStats}
	err := s.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE polled_at IS NULL), count(*) FILTER (WHERE polled_at IS NOT NULL),
		min(created_at) FROM work_items WHERE environment_id = $1 AND state = 'queued'`, environmentID).
		Scan(&st.Depth, &st.Pending, &st.OldestQueuedAt)
	if err != nil {
		return nil, s.dbErr("work stats", err)
	}
	st.OldestQueuedAt = utc(st.OldestQueuedAt)
	return st, nil
}

// WaitWork returns a channel woken whenever the environment may have deliverable work, in any process.
func (s *Store) WaitWork(environmentID string) (<-chan struct{}, func()) {
	return s.hub.Subscribe(store.WorkKey(environmentID))
}

func scanWork(row pgx.Row) (*apitype.Work, error) {
	w := apitype.Work{Type: apitype.ObjectWork, Data: apitype.WorkData{Type: apitype.ObjectSession}}
	var md []byte
	if err := row.Scan(&w.ID, &w.EnvironmentID, &w.Data.ID, &w.State, &md, &w.CreatedAt, &w.AcknowledgedAt, &w.StartedAt,
		&w.LatestHeartbeatAt, &w.StopRequestedAt, &w.StoppedAt, &w.WorkerID, &w.PolledAt, &w.LeaseExpiresAt,
		&w.TTLSeconds, &w.TokenHash, &w.Held, &w.LostSeq); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(md, &w.Metadata); err != nil {
		return nil, err
	}
	if w.Metadata == nil {
		w.Metadata = map[string]string{}
	}
	w.CreatedAt = w.CreatedAt.UTC()
	for _, t := range []**time.Time{&w.AcknowledgedAt, &w.StartedAt, &w.LatestHeartbeatAt, &w.StopRequestedAt,
		&w.StoppedAt, &w.PolledAt, &w.LeaseExpiresAt} {
		*t = utc(*t)
	}
	return &w, nil
}
