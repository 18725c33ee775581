package postgres

import (
	"context"
	"time"

	"github.com/corralhq/corral/internal/store"
)

// rateTakeSQL takes a token in one statement, under the bucket's row lock: $1 key, $2 rate, $3 burst, $4 now.
const rateTakeSQL = `INSERT INTO rate_buckets AS b (key, tokens, at, taken) VALUES ($1, $3::float8 - 1, $4, true)
	ON CONFLICT (key) DO UPDATE SET
		taken = least($3::float8, b.tokens + greatest(0, extract(epoch FROM $4 - b.at))::float8 * $2::float8) >= 1,
		tokens = least($3::float8, b.tokens + greatest(0, extract(epoch FROM $4 - b.at))::float8 * $2::float8) -
			(least($3::float8, b.tokens + greatest(0, extract(epoch FROM $4 - b.at))::float8 * $2::float8) >= 1)::int,
		at = greatest(b.at, $4)
	RETURNING taken, tokens`

// RateTake takes a token from a bucket.
func (s *Store) RateTake(ctx context.Context, key string, rate float64, burst int, now time.Time) (time.Duration, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	var taken bool
	var tokens float64
	if err := s.pool.QueryRow(ctx, rateTakeSQL, key, rate, burst, now).Scan(&taken, &tokens); err != nil {
		return 0, s.dbErr("rate take "+key, err)
	}
	if taken {
		return 0, nil
	}
	return store.RateWait(tokens, rate), nil
}
