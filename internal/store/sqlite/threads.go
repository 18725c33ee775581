package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

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

func scanThread(row scanner) (*apitype.SessionThread, error) {
	var (
		doc, usage, stats []byte
		created, updated  int64
		archived          sql.NullInt64
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
	t.CreatedAt, t.UpdatedAt, t.ArchivedAt = fromMicros(created), fromMicros(updated), timePtr(archived)
	return t, nil
}

// threadRow is a thread as putThreads writes it, encoded before the write.
type threadRow struct {
	t                 apitype.SessionThread
	doc, usage, stats []byte
}

// threadRows encodes the threads an append or a session create writes to the session. Each needs an id; a
// thread given twice is written once, the later one's changes applied to the earlier under store.KeepThread's
// rule, as two writes in turn would be.
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
		var err error
		if r.doc, err = json.Marshal(&r.t); err != nil {
			return nil, fmt.Errorf("encode thread %s: %w", r.t.ID, err)
		}
		if r.usage, err = json.Marshal(r.t.Usage); err != nil {
			return nil, fmt.Errorf("encode thread %s usage: %w", r.t.ID, err)
		}
		if r.stats, err = json.Marshal(r.t.Stats); err != nil {
			return nil, fmt.Errorf("encode thread %s stats: %w", r.t.ID, err)
		}
	}
	return rows, nil
}

// putThreads writes threads to the session in w's transaction: a thread the session does not have is inserted
// as given; a stored one takes the given status, usage, stats and updated_at, and keeps the rest (its document,
// parent, creation and archive times), which is store.KeepThread's rule.
func putThreads(w *wtx, sessionID string, rows []threadRow) error {
	for i := range rows {
		r := &rows[i]
		if _, err := w.exec(`INSERT INTO threads (session_id, id, parent_thread_id, status, usage, stats, created_at,
				updated_at, archived_at, doc) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (session_id, id) DO UPDATE SET status = excluded.status, usage = excluded.usage,
				stats = excluded.stats, updated_at = excluded.updated_at`,
			sessionID, r.t.ID, r.t.ParentThreadID, r.t.Status, r.usage, r.stats, micros(r.t.CreatedAt),
			micros(r.t.UpdatedAt), nullMicros(r.t.ArchivedAt), r.doc); err != nil {
			return err
		}
	}
	return nil
}

// ThreadGet returns a thread of a session.
func (s *Store) ThreadGet(ctx context.Context, sessionID, threadID string) (*apitype.SessionThread, error) {
	return threads.get(ctx, s, threadID, "t.session_id = ? AND t.id = ?", sessionID, threadID)
}

// ThreadList lists a session's threads by (created_at, id), archived ones included.
func (s *Store) ThreadList(ctx context.Context, p *store.ThreadListParams) ([]apitype.SessionThread, error) {
	var f filter
	f.add("t.session_id = ?", p.SessionID)
	if len(p.Statuses) > 0 {
		f.add("t.status IN ("+placeholders(len(p.Statuses))+")", anys(p.Statuses)...)
	}
	return threads.list(ctx, s, &f, &store.ListParams{Limit: p.Limit, After: p.After, IncludeArchived: true})
}

// ThreadArchive archives a thread if check allows it (store.Archive's rule: once).
func (s *Store) ThreadArchive(ctx context.Context, sessionID, threadID string,
	check func(*apitype.SessionThread) error) (*apitype.SessionThread, error) {
	var refused error
	t, err := writeResult(ctx, s, func(w *wtx) (*apitype.SessionThread, error) {
		cur, err := threads.read(w, "t.session_id = ? AND t.id = ?", sessionID, threadID)
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
		_, err = w.exec(`UPDATE threads SET archived_at = ?, updated_at = ? WHERE session_id = ? AND id = ?`,
			nullMicros(cur.ArchivedAt), micros(cur.UpdatedAt), sessionID, threadID)
		return cur, err
	}, "archive thread %s of session %s", threadID, sessionID)
	if refused != nil {
		return nil, refused
	}
	return t, err
}
