package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// threads select a thread's document plus the columns the store owns, which override the document's copies.
var threads = &table[apitype.SessionThread]{
	what: "thread", name: "threads", alias: "t",
	sel: `SELECT t.doc, t.session_id, t.status, t.usage, t.stats, t.created_at, t.updated_at, t.archived_at
		FROM threads t`,
	scan: scanThread,
}

func scanThread(row pgx.Row) (*apitype.SessionThread, error) {
	var (
		doc, usage, stats []byte
		created, updated  time.Time
		archived          *time.Time
		sessionID, status string
	)
	if err := row.Scan(&doc, &sessionID, &status, &usage, &stats, &created, &updated, &archived); err != nil {
		return nil, err
	}
	t, err := store.DecodeThread(doc, usage, stats)
	if err != nil {
		return nil, err
	}
	t.SessionID, t.Status = sessionID, status
	t.CreatedAt, t.UpdatedAt, t.ArchivedAt = created.UTC(), updated.UTC(), utc(archived)
	return t, nil
}

// threadRow is a thread as the append and putThreads write it, encoded before the write.
type threadRow struct {
	t                 apitype.SessionThread
	doc, usage, stats string
}

// threadRows encodes the threads an append or a session create writes to the session. Each needs an id; a
// thread given twice is written once, the later one's changes applied to the earlier under store.KeepThread's
// rule, as two writes in turn would be (one statement cannot write a row twice).
func threadRows(sessionID string, ts []apitype.SessionThread) ([]threadRow, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	out, err := store.ThreadWrites(sessionID, ts)
	if err != nil {
		return nil, err
	}
	rows := make([]threadRow, len(out))
	for i := range out {
		r := &rows[i]
		r.t = out[i]
		for _, f := range []struct {
			dst *string
			v   any
		}{{&r.doc, &r.t}, {&r.usage, r.t.Usage}, {&r.stats, r.t.Stats}} {
			b, err := json.Marshal(f.v)
			if err != nil {
				return nil, fmt.Errorf("encode thread %s: %w", r.t.ID, err)
			}
			*f.dst = string(b)
		}
	}
	return rows, nil
}

// threadArgs gathers the threads of a round's requests as appendThreadsSQL's arrays.
type threadArgs struct {
	idx                                []int32
	ids, statuses, usages, stats, docs []string
	parents                            []*string
	created, updated                   []time.Time
	archived                           []*time.Time
}

// add adds the threads of request i.
func (a *threadArgs) add(i int32, rows []threadRow) {
	for _, r := range rows {
		a.idx = append(a.idx, i)
		a.ids = append(a.ids, r.t.ID)
		a.parents = append(a.parents, r.t.ParentThreadID)
		a.statuses = append(a.statuses, r.t.Status)
		a.usages = append(a.usages, r.usage)
		a.stats = append(a.stats, r.stats)
		a.created = append(a.created, r.t.CreatedAt)
		a.updated = append(a.updated, r.t.UpdatedAt)
		a.archived = append(a.archived, r.t.ArchivedAt)
		a.docs = append(a.docs, r.doc)
	}
}

// args are appendThreadsSQL's arguments $26-$35.
func (a *threadArgs) args() []any {
	return []any{a.idx, a.ids, a.parents, a.statuses, a.usages, a.stats, a.created, a.updated, a.archived, a.docs}
}

// putThreads writes threads to a session being created, in its transaction.
func putThreads(ctx context.Context, tx pgx.Tx, sessionID string, rows []threadRow) error {
	for _, r := range rows {
		if _, err := tx.Exec(ctx, `INSERT INTO threads (session_id, id, parent_thread_id, status, usage, stats,
				created_at, updated_at, archived_at, doc) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			sessionID, r.t.ID, r.t.ParentThreadID, r.t.Status, r.usage, r.stats, r.t.CreatedAt, r.t.UpdatedAt,
			r.t.ArchivedAt, r.doc); err != nil {
			return err
		}
	}
	return nil
}

// ThreadGet returns a thread of a session.
func (s *Store) ThreadGet(ctx context.Context, sessionID, threadID string) (*apitype.SessionThread, error) {
	return threads.get(ctx, s, "t.session_id = $1 AND t.id = $2", sessionID, threadID)
}

// ThreadList lists a session's threads by (created_at, id), archived ones included.
func (s *Store) ThreadList(ctx context.Context, p *store.ThreadListParams) ([]apitype.SessionThread, error) {
	q := threads.query()
	fmt.Fprintf(&q.sql, " AND t.session_id = %s", q.arg(p.SessionID))
	if len(p.Statuses) > 0 {
		fmt.Fprintf(&q.sql, " AND t.status = ANY(%s)", q.arg(p.Statuses))
	}
	return threads.list(ctx, s, q, &store.ListParams{Limit: p.Limit, After: p.After, IncludeArchived: true})
}

// ThreadArchive archives a thread if check allows it (store.Archive's rule: once), under its row lock.
func (s *Store) ThreadArchive(ctx context.Context, sessionID, threadID string,
	check func(*apitype.SessionThread) error) (*apitype.SessionThread, error) {
	var refused error
	t, err := txResult(ctx, s, "thread archive", func(tx pgx.Tx) (*apitype.SessionThread, error) {
		cur, err := threads.read(ctx, tx, " FOR NO KEY UPDATE", "t.session_id = $1 AND t.id = $2", sessionID, threadID)
		if err != nil {
			return nil, err
		}
		if check != nil {
			if refused = check(cur); refused != nil {
				return nil, refused
			}
		}
		if !store.Archive(&cur.ArchivedAt, &cur.UpdatedAt, apitype.Now()) {
			return cur, nil
		}
		_, err = tx.Exec(ctx, `UPDATE threads SET archived_at = $3, updated_at = $4 WHERE session_id = $1 AND id = $2`,
			sessionID, threadID, cur.ArchivedAt, cur.UpdatedAt)
		return cur, err
	})
	if refused != nil {
		return nil, refused
	}
	return t, err
}
