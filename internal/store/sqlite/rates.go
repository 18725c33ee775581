package sqlite

import (
	"context"
	"time"

	"github.com/corralhq/corral/internal/store"
)

// rateTakeSQL takes a token in one statement: ?1 key, ?2 rate, ?3 burst, ?4 now (micros).
const rateTakeSQL = `INSERT INTO rate_buckets AS b (key, tokens, at, taken) VALUES (?1, ?3 - 1, ?4, 1)
	ON CONFLICT (key) DO UPDATE SET
		taken = min(?3, b.tokens + max(0, ?4 - b.at) / 1e6 * ?2) >= 1,
		tokens = min(?3, b.tokens + max(0, ?4 - b.at) / 1e6 * ?2) -
			(min(?3, b.tokens + max(0, ?4 - b.at) / 1e6 * ?2) >= 1),
		at = max(b.at, ?4)
	RETURNING taken, tokens`

// RateTake takes a token from a bucket (one write of the single writer).
func (s *Store) RateTake(ctx context.Context, key string, rate float64, burst int, now time.Time) (time.Duration, error) {
	return writeResult(ctx, s, func(w *wtx) (time.Duration, error) {
		var taken bool
		var tokens float64
		if err := w.queryRow(rateTakeSQL, key, rate, burst, micros(now)).Scan(&taken, &tokens); err != nil {
			return 0, err
		}
		if taken {
			return 0, nil
		}
		return store.RateWait(tokens, rate), nil
	}, "take a token of %s", key)
}
