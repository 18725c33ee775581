package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

const workColumns = `id, environment_id, session_id, state, metadata, created_at, acknowledged_at, started_at,
	latest_heartbeat_at, stop_requested_at, stopped_at, worker_id, polled_at, lease_expires_at, ttl_seconds,
	coalesce(token_hash, ''), held, lost_seq`

// workLeased is the condition of an item a worker holds by its lease.
const workLeased = `state IN ('starting', 'active', 'stopping')`

// WorkEnsure returns the session's item that is not stopping or stopped, queuing one when there is none.
func (s *Store) WorkEnsure(ctx context.Context, p *store.WorkEnsureParams) (*apitype.Work, bool, error) {
	var out *apitype.Work
	var created bool
	err := s.write(ctx, func(w *wtx) error {
		out, created = nil, false
		var one int
		if err := w.queryRow(`SELECT 1 FROM sessions WHERE id = ?`, p.SessionID).Scan(&one); errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		} else if err != nil {
			return err
		}
		cur, err := scanWork(w.queryRow(`SELECT `+workColumns+` FROM work_items
			WHERE session_id = ? AND state IN ('queued', 'starting', 'active') ORDER BY created_at DESC LIMIT 1`, p.SessionID))
		if err == nil {
			out = cur
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if _, err := w.exec(`INSERT INTO work_items (id, environment_id, session_id, state, metadata, created_at)
			VALUES (?, ?, ?, 'queued', '{}', ?)`, p.ID, p.EnvironmentID, p.SessionID, micros(p.At)); err != nil {
			if isConstraint(err) {
				return store.ErrConflict
			}
			return err
		}
		out, created = w.work(p.EnvironmentID, p.ID)
		return nil
	}, func() {
		if created {
			s.hub.NotifySession(store.WorkKey(p.EnvironmentID))
		}
	})
	if err != nil {
		return nil, false, fmt.Errorf("sqlite: ensure work of %s: %w", p.SessionID, err)
	}
	return out, created, nil
}

// work reads an item in a write transaction; the caller has just written it.
func (w *wtx) work(envID, id string) (*apitype.Work, bool) {
	wk, err := scanWork(w.queryRow(`SELECT `+workColumns+` FROM work_items WHERE environment_id = ? AND id = ?`, envID, id))
	if err != nil {
		return nil, false
	}
	return wk, true
}

// WorkPoll re-queues the environment's items whose lease expired and delivers the oldest deliverable one.
func (s *Store) WorkPoll(ctx context.Context, p *store.WorkPollParams) (*apitype.Work, error) {
	now, reclaim := micros(p.At), micros(p.At.Add(-p.ReclaimAfter))
	// Workers poll: look on the read pool first, so a poll with nothing to deliver costs the writer nothing.
	var found int
	err := s.readRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM work_items WHERE environment_id = ?1 AND state <> 'stopped'
		AND ((state = 'queued' AND held = 0 AND (polled_at IS NULL OR polled_at <= ?2))
			OR (`+workLeased+` AND lease_expires_at <= ?3)) LIMIT 1)`, p.EnvironmentID, reclaim, now).Scan(&found)
	if err != nil {
		return nil, s.readErr("poll work", err)
	}
	if found == 0 {
		return nil, fmt.Errorf("sqlite: poll work: %w", store.ErrNoWork)
	}
	var out *apitype.Work
	var woken []string
	err = s.write(ctx, func(w *wtx) error {
		out, woken = nil, woken[:0]
		var err error
		if woken, err = w.reclaimExpired(p.EnvironmentID, now); err != nil {
			return err
		}
		var id string
		err = w.queryRow(`SELECT id FROM work_items WHERE environment_id = ? AND state = 'queued' AND held = 0
			AND (polled_at IS NULL OR polled_at <= ?) ORDER BY created_at, id LIMIT 1`, p.EnvironmentID, reclaim).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return nil // the reclaim is still worth committing
		}
		if err != nil {
			return err
		}
		if _, err := w.exec(`UPDATE work_items SET polled_at = ?, worker_id = ?, token_hash = ?, key_id = ? WHERE id = ?`,
			now, p.WorkerID, p.TokenHash, p.KeyID, id); err != nil {
			return err
		}
		out, _ = w.work(p.EnvironmentID, id)
		return nil
	}, func() {
		for _, id := range woken {
			s.hub.NotifySession(id)
		}
		if len(woken) > 0 {
			s.hub.NotifyRunnable()
		}
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: poll work: %w", err)
	}
	if out == nil {
		return nil, fmt.Errorf("sqlite: poll work: %w", store.ErrNoWork)
	}
	return out, nil
}

// reclaimExpired re-queues the environment's leased items whose lease ended (held, LostSeq recorded, the
// session woken), or stops those a stop was requested for, and returns the sessions it woke.
func (w *wtx) reclaimExpired(envID string, now int64) ([]string, error) {
	rows, err := w.query(`SELECT id, session_id, state FROM work_items WHERE environment_id = ? AND `+workLeased+`
		AND lease_expires_at <= ?`, envID, now)
	if err != nil {
		return nil, err
	}
	type item struct{ id, session, state string }
	var items []item
	for rows.Next() {
		var it item
		if err := rows.Scan(&it.id, &it.session, &it.state); err != nil {
			rows.Close()
			return nil, err
		}
		items = append(items, it)
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	var woken []string
	for _, it := range items {
		q := `UPDATE work_items SET state = 'queued', held = 1, worker_id = '', polled_at = NULL, lease_expires_at = NULL,
			token_hash = NULL, acknowledged_at = NULL, started_at = NULL, latest_heartbeat_at = NULL,
			lost_seq = max(lost_seq, (SELECT last_seq FROM sessions WHERE id = ?1)) WHERE id = ?2 AND ?3 > 0`
		if it.state == string(apitype.WorkStopping) {
			q = `UPDATE work_items SET state = 'stopped', stopped_at = ?3, lease_expires_at = NULL,
				token_hash = NULL, lost_seq = max(lost_seq, (SELECT last_seq FROM sessions WHERE id = ?1)) WHERE id = ?2`
		}
		if _, err := w.exec(q, it.session, it.id, now); err != nil {
			return nil, err
		}
		if err := w.wakeSession(it.session, now); err != nil {
			return nil, err
		}
		woken = append(woken, it.session)
	}
	return woken, nil
}

// wakeSession makes a session runnable, as an append with Wake does.
func (w *wtx) wakeSession(id string, now int64) error {
	_, err := w.exec(`UPDATE sessions SET woken_at = CASE WHEN wake_seq <= handled_wake_seq THEN ? ELSE woken_at END,
		wake_seq = wake_seq + 1 WHERE id = ?`, now, id)
	return err
}

// WorkAck moves a delivered, queued item to starting.
func (s *Store) WorkAck(ctx context.Context, p *store.WorkAckParams) (*apitype.Work, error) {
	if err := store.CheckWorkTTL(p.TTL); err != nil {
		return nil, fmt.Errorf("sqlite: ack work: %w", err)
	}
	var out *apitype.Work
	err := s.write(ctx, func(w *wtx) error {
		out = nil
		n, err := w.execN(`UPDATE work_items SET state = 'starting', acknowledged_at = ?1, lease_expires_at = ?2,
			ttl_seconds = ?3 WHERE environment_id = ?4 AND id = ?5 AND state = 'queued' AND held = 0 AND polled_at IS NOT NULL`,
			micros(p.At), micros(p.At.Add(p.TTL)), int(p.TTL/time.Second), p.EnvironmentID, p.WorkID)
		if err != nil {
			return err
		}
		var ok bool
		if out, ok = w.work(p.EnvironmentID, p.WorkID); !ok {
			return store.ErrNotFound
		}
		if n == 0 {
			return store.ErrConflict
		}
		return nil
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlite: ack work %s: %w", p.WorkID, err)
	}
	return out, nil
}

// WorkHeartbeat extends the holder's lease.
func (s *Store) WorkHeartbeat(ctx context.Context, p *store.WorkHeartbeatParams) (*apitype.WorkHeartbeat, error) {
	if err := store.CheckWorkTTL(p.TTL); err != nil {
		return nil, fmt.Errorf("sqlite: heartbeat: %w", err)
	}
	var hb *apitype.WorkHeartbeat
	err := s.write(ctx, func(w *wtx) error {
		hb = nil
		cur, ok := w.work(p.EnvironmentID, p.WorkID)
		if !ok {
			return store.ErrNotFound
		}
		var err error
		hb, err = store.Heartbeat(cur, p)
		if err != nil || !hb.LeaseExtended {
			return err
		}
		_, err = w.exec(`UPDATE work_items SET state = 'active', started_at = coalesce(started_at, ?1),
			latest_heartbeat_at = ?1, lease_expires_at = ?2, ttl_seconds = ?3 WHERE id = ?4`,
			micros(p.At), micros(p.At.Add(p.TTL)), hb.TTLSeconds, p.WorkID)
		return err
	}, nil)
	if err != nil && !errors.Is(err, store.ErrConflict) {
		return nil, fmt.Errorf("sqlite: heartbeat %s: %w", p.WorkID, err)
	}
	if err != nil {
		return hb, fmt.Errorf("sqlite: heartbeat %s: %w", p.WorkID, err)
	}
	return hb, nil
}

// WorkStop stops an item, or asks its holder to.
func (s *Store) WorkStop(ctx context.Context, p *store.WorkStopParams) (*apitype.Work, error) {
	var out *apitype.Work
	var woke string
	err := s.write(ctx, func(w *wtx) error {
		out, woke = nil, ""
		cur, ok := w.work(p.EnvironmentID, p.WorkID)
		if !ok {
			return store.ErrNotFound
		}
		next, lost, err := store.StopTransition(cur, p.Force)
		if err != nil {
			return err
		}
		now := micros(p.At)
		if next == apitype.WorkStopping {
			if _, err := w.exec(`UPDATE work_items SET state = 'stopping', stop_requested_at = coalesce(stop_requested_at, ?)
				WHERE id = ?`, now, p.WorkID); err != nil {
				return err
			}
		} else {
			if _, err := w.exec(`UPDATE work_items SET state = 'stopped', stop_requested_at = coalesce(stop_requested_at, ?1),
				stopped_at = ?1, lease_expires_at = NULL, token_hash = NULL, held = 0,
				lost_seq = CASE WHEN ?2 THEN max(lost_seq, (SELECT last_seq FROM sessions WHERE id = ?3)) ELSE lost_seq END
				WHERE id = ?4`, now, lost, cur.Data.ID, p.WorkID); err != nil {
				return err
			}
			if err := w.wakeSession(cur.Data.ID, now); err != nil {
				return err
			}
			woke = cur.Data.ID
		}
		out, _ = w.work(p.EnvironmentID, p.WorkID)
		return nil
	}, func() {
		if woke != "" {
			s.hub.NotifySession(woke)
			s.hub.NotifyRunnable()
		}
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: stop work %s: %w", p.WorkID, err)
	}
	return out, nil
}

// WorkResume makes a held item deliverable again.
func (s *Store) WorkResume(ctx context.Context, environmentID, workID string) error {
	err := s.write(ctx, func(w *wtx) error {
		n, err := w.execN(`UPDATE work_items SET held = 0 WHERE environment_id = ? AND id = ?`, environmentID, workID)
		if err == nil && n == 0 {
			err = store.ErrNotFound
		}
		return err
	}, func() { s.hub.NotifySession(store.WorkKey(environmentID)) })
	if err != nil {
		return fmt.Errorf("sqlite: resume work %s: %w", workID, err)
	}
	return nil
}

// WorkGet returns an item of the environment.
func (s *Store) WorkGet(ctx context.Context, environmentID, workID string) (*apitype.Work, error) {
	return s.workRead(ctx, "get work", `SELECT `+workColumns+` FROM work_items WHERE environment_id = ? AND id = ?`,
		environmentID, workID)
}

// WorkBySession returns the session's newest item.
func (s *Store) WorkBySession(ctx context.Context, sessionID string) (*apitype.Work, error) {
	return s.workRead(ctx, "work by session", `SELECT `+workColumns+` FROM work_items WHERE session_id = ?
		ORDER BY created_at DESC, id DESC LIMIT 1`, sessionID)
}

// WorkByTokenHash returns the item whose current sessions token has this hash.
func (s *Store) WorkByTokenHash(ctx context.Context, hash string) (*apitype.Work, error) {
	return s.workRead(ctx, "work by token", `SELECT `+workColumns+` FROM work_items WHERE token_hash = ?`, hash)
}

func (s *Store) workRead(ctx context.Context, op, query string, args ...any) (*apitype.Work, error) {
	wk, err := scanWork(s.readRow(ctx, query, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlite: %s: %w", op, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.readErr(op, err)
	}
	return wk, nil
}

// WorkUpdateMetadata sets an item's metadata to fn's answer, in the write's transaction.
func (s *Store) WorkUpdateMetadata(ctx context.Context, environmentID, workID string, fn func(map[string]string) (map[string]string, error)) (*apitype.Work, error) {
	var out *apitype.Work
	err := s.write(ctx, func(w *wtx) error {
		cur, ok := w.work(environmentID, workID)
		if !ok {
			return store.ErrNotFound
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
		if _, err := w.exec(`UPDATE work_items SET metadata = ? WHERE id = ?`, md, workID); err != nil {
			return err
		}
		out = cur
		return nil
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlite: update work %s: %w", workID, err)
	}
	return out, nil
}

// WorkList lists the environment's items.
func (s *Store) WorkList(ctx context.Context, environmentID string, p *store.ListParams) ([]apitype.Work, error) {
	f := &filter{}
	f.add("work_items.environment_id = ?", environmentID)
	lp := *p
	lp.IncludeArchived, lp.CreatedAfter, lp.CreatedFrom, lp.CreatedBefore, lp.CreatedTo = true, nil, nil, nil, nil
	tail := f.addList("work_items", &lp)
	rows, err := s.readQuery(ctx, `SELECT `+workColumns+` FROM work_items`+f.where()+tail,
		append(f.args, limitArg(p.Limit))...)
	if err != nil {
		return nil, s.readErr("list work", err)
	}
	out, err := collect(rows, scanWork)
	if err != nil {
		return nil, s.readErr("list work", err)
	}
	return out, nil
}

// WorkStats counts the environment's queue.
func (s *Store) WorkStats(ctx context.Context, environmentID string) (*apitype.WorkQueueStats, error) {
	st := &apitype.WorkQueueStats{Type: apitype.ObjectWorkQueueStats}
	var oldest sql.NullInt64
	err := s.readRow(ctx, `SELECT coalesce(sum(polled_at IS NULL), 0), coalesce(sum(polled_at IS NOT NULL), 0), min(created_at)
		FROM work_items WHERE environment_id = ? AND state = 'queued'`, environmentID).Scan(&st.Depth, &st.Pending, &oldest)
	if err != nil {
		return nil, s.readErr("work stats", err)
	}
	st.OldestQueuedAt = timePtr(oldest)
	return st, nil
}

// WaitWork returns a channel woken when the environment may have deliverable work through this Store.
func (s *Store) WaitWork(environmentID string) (<-chan struct{}, func()) {
	return s.hub.Subscribe(store.WorkKey(environmentID))
}

func scanWork(row scanner) (*apitype.Work, error) {
	w := apitype.Work{Type: apitype.ObjectWork, Data: apitype.WorkData{Type: apitype.ObjectSession}}
	var md []byte
	var created int64
	var acked, started, beat, stopReq, stopped, polled, expires sql.NullInt64
	var held int
	if err := row.Scan(&w.ID, &w.EnvironmentID, &w.Data.ID, &w.State, &md, &created, &acked, &started, &beat,
		&stopReq, &stopped, &w.WorkerID, &polled, &expires, &w.TTLSeconds, &w.TokenHash, &held, &w.LostSeq); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(md, &w.Metadata); err != nil {
		return nil, err
	}
	if w.Metadata == nil {
		w.Metadata = map[string]string{}
	}
	w.CreatedAt = fromMicros(created)
	w.AcknowledgedAt, w.StartedAt, w.LatestHeartbeatAt = timePtr(acked), timePtr(started), timePtr(beat)
	w.StopRequestedAt, w.StoppedAt, w.PolledAt, w.LeaseExpiresAt = timePtr(stopReq), timePtr(stopped), timePtr(polled), timePtr(expires)
	w.Held = held != 0
	return &w, nil
}
