package store

import (
	"context"
	"time"
)

// RateStore keeps token buckets that every process of a store shares: the fair shares of workspaces hold across
// a fleet of API servers (internal/api).
type RateStore interface {
	// RateTake takes a token from the bucket key at now: the bucket holds at most burst tokens and gains rate
	// tokens a second (a new bucket is full). It returns 0 if a token was taken, else how long until one will
	// be. Times before the bucket's last take count as that time (clocks of processes differ).
	RateTake(ctx context.Context, key string, rate float64, burst int, now time.Time) (time.Duration, error)
}

// RateWait is how long a bucket that holds tokens (< 1) waits for its next token at rate per second.
func RateWait(tokens, rate float64) time.Duration {
	return time.Duration((1 - tokens) / rate * float64(time.Second))
}
