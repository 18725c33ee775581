package sqlite

import (
	"context"
	"time"
)

// SlotTake counts and takes in one write of the single writer, so no other take comes between.
func (s *Store) SlotTake(ctx context.Context, group, id string, max int, now, until time.Time) (bool, int, error) {
	type result struct {
		held bool
		n    int
	}
	r, err := writeResult(ctx, s, func(w *wtx) (result, error) {
		var held, others int
		if err := w.queryRow(`SELECT count(*) FILTER (WHERE id = ?3), count(*) FILTER (WHERE id <> ?3)
			FROM slots WHERE grp = ?1 AND expires_at > ?2`, group, micros(now), id).Scan(&held, &others); err != nil {
			return result{}, err
		}
		if held == 0 && others >= max {
			return result{n: others}, nil
		}
		_, err := w.exec(`INSERT INTO slots (id, grp, expires_at) VALUES (?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET grp = excluded.grp, expires_at = excluded.expires_at`, id, group, micros(until))
		return result{held: true, n: others + 1}, err
	}, "take slot %s", id)
	return r.held, r.n, err
}

// SlotRelease frees a slot.
func (s *Store) SlotRelease(ctx context.Context, id string) error {
	err := s.write(ctx, func(w *wtx) error {
		_, err := w.exec(`DELETE FROM slots WHERE id = ?`, id)
		return err
	}, nil)
	return writeErr(err, "release slot %s", id)
}
