package store

import (
	"context"
	"fmt"
	"time"
)

// LeaderStore holds named leader leases: periodic work that must run once per fleet (sweeps, garbage
// collection, cron firing, webhook retries; internal/maintain) runs on the one process holding its lease. A
// leader lease is fenced like a session lease: the holder renews it with its token before it expires, and a
// holder whose lease expired and was taken over gets ErrLeaseLost and stops.
type LeaderStore interface {
	// LeaderAcquire takes the named lease for p.Owner for p.TTL, with a fresh token, if no one holds it or its
	// holder let it expire. ErrConflict when another holder's lease is still live.
	LeaderAcquire(ctx context.Context, p *LeaderAcquireParams) (*Leader, error)
	// LeaderRenew extends the lease by ttl from now, returning the renewed lease, or ErrLeaseLost when it
	// expired or another holder took it.
	LeaderRenew(ctx context.Context, l *Leader, ttl time.Duration) (*Leader, error)
	// LeaderRelease gives the lease up, so that another process may acquire it at once. ErrLeaseLost if
	// another holder took it over.
	LeaderRelease(ctx context.Context, l *Leader) error
}

// Leader is a held leader lease.
type Leader struct {
	Name      string
	Owner     string
	Token     string
	ExpiresAt time.Time
}

// LeaderAcquireParams acquires a leader lease.
type LeaderAcquireParams struct {
	Name  string
	Owner string
	TTL   time.Duration
}

// Validate says which field of p is wrong, or nil.
func (p *LeaderAcquireParams) Validate() error {
	switch {
	case p.Name == "":
		return fmt.Errorf("leader acquire: name is required")
	case p.TTL <= 0:
		return fmt.Errorf("leader acquire: ttl must be > 0, got %s", p.TTL)
	}
	return nil
}
