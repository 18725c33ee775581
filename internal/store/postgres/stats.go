package postgres

import (
	"context"

	"github.com/corralhq/corral/internal/store"
)

// Stats counts the sessions by status and the work items waiting for a worker.
func (s *Store) Stats(ctx context.Context) (*store.Stats, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	st := &store.Stats{Sessions: map[string]int{}}
	rows, err := s.pool.Query(ctx, `SELECT status, count(*) FROM sessions WHERE archived_at IS NULL GROUP BY status`)
	if err != nil {
		return nil, s.dbErr("stats", err)
	}
	defer rows.Close()
	for rows.Next() {
		var status string
		var n int
		if err := rows.Scan(&status, &n); err != nil {
			return nil, s.dbErr("stats", err)
		}
		st.Sessions[status] = n
	}
	if err := rows.Err(); err != nil {
		return nil, s.dbErr("stats", err)
	}
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM work_items WHERE state = 'queued' AND polled_at IS NULL`).Scan(&st.WorkQueued); err != nil {
		return nil, s.dbErr("stats", err)
	}
	return st, nil
}
