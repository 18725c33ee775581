package store

import (
	"context"
	"fmt"
	"time"
)

// Lease is a brain's claim on a session. Token fences every write the brain makes.
type Lease struct {
	SessionID string
	Owner     string
	Token     string
	ExpiresAt time.Time
	// WakeSeq is the session's wake counter when the lease was taken or last renewed; releasing with it
	// tells the store which wake-ups the brain has handled.
	WakeSeq int64
}

// LeaseStore schedules sessions onto brains.
type LeaseStore interface {
	// LeaseClaim claims up to p.Limit runnable sessions whose lease is free or expired, for ttl, each with a
	// lease of its own: first those whose lease expired (a brain stopped in their turn), by when it expired, then
	// those holding none, woken longest ago first. It returns them woken longest ago first. A session is runnable
	// when it has been woken (EventAppend with Wake) since its last release. ErrNoWork when none is.
	LeaseClaim(ctx context.Context, p *LeaseClaimParams) ([]*Lease, error)
	// LeaseRenew extends the lease by ttl from now, returning the renewed lease, or ErrLeaseLost. It also
	// refreshes WakeSeq.
	LeaseRenew(ctx context.Context, l *Lease, ttl time.Duration) (*Lease, error)
	// LeaseRelease gives the session up. Wake-ups up to l.WakeSeq count as handled: if the session was woken
	// again since, it stays runnable for the next claim. ErrLeaseLost if the lease is no longer held.
	LeaseRelease(ctx context.Context, l *Lease) error
	// WaitRunnable returns a channel that receives a value when some session may have become runnable.
	WaitRunnable() (<-chan struct{}, func())
}

// LeaseClaimParams claims runnable sessions.
type LeaseClaimParams struct {
	Owner     string
	TTL       time.Duration
	SessionID string // if set, claim only this session (and only if runnable)
	// Limit is the most sessions one claim takes (0 means 1): a brain with several idle workers claims for
	// all of them in one write.
	Limit int
}

// MaxClaimLimit caps LeaseClaimParams.Limit.
const MaxClaimLimit = 256

// ClaimLimit returns p's effective limit, or an error naming the field.
func (p *LeaseClaimParams) ClaimLimit() (int, error) {
	switch {
	case p.TTL <= 0:
		return 0, fmt.Errorf("ttl must be > 0, got %s", p.TTL)
	case p.Limit < 0 || p.Limit > MaxClaimLimit:
		return 0, fmt.Errorf("limit must be in [0, %d], got %d", MaxClaimLimit, p.Limit)
	case p.SessionID != "":
		return 1, nil
	}
	return max(p.Limit, 1), nil
}
