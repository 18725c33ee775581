package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// SlotTake counts and takes under a transaction lock of the group (pg_advisory_xact_lock), so that two
// processes never both take the group's last slot.
func (s *Store) SlotTake(ctx context.Context, group, id string, max int, now, until time.Time) (bool, int, error) {
	type result struct {
		held bool
		n    int
	}
	r, err := txResult(ctx, s, "slot take", func(tx pgx.Tx) (result, error) {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('corral slots ' || $1, 0))`, group); err != nil {
			return result{}, err
		}
		var held, others int
		if err := tx.QueryRow(ctx, `SELECT count(*) FILTER (WHERE id = $3), count(*) FILTER (WHERE id <> $3)
			FROM slots WHERE grp = $1 AND expires_at > $2`, group, now, id).Scan(&held, &others); err != nil {
			return result{}, err
		}
		if held == 0 && others >= max {
			return result{n: others}, nil
		}
		_, err := tx.Exec(ctx, `INSERT INTO slots (id, grp, expires_at) VALUES ($1, $2, $3)
			ON CONFLICT (id) DO UPDATE SET grp = excluded.grp, expires_at = excluded.expires_at`, id, group, until)
		return result{held: true, n: others + 1}, err
	})
	return r.held, r.n, err
}

// SlotRelease frees a slot.
func (s *Store) SlotRelease(ctx context.Context, id string) error {
	if err := s.check(); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `DELETE FROM slots WHERE id = $1`, id)
	return s.dbErr("slot release", err)
}
