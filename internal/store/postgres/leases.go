package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/corralhq/corral/internal/store"
)

// claimSQL locks the sessions a claim takes: the runnable ones whose lease lapsed (a brain that stopped without
// releasing them), by when it lapsed, then as many of those holding no lease as are still wanted, longest woken
// first, each part a search of its own partial index (sessions_leased, sessions_unleased), so that the sessions
// leased and in their turns are not walked. Rows another claimer is taking are skipped, not waited for; every
// row locked is claimed (the second part's limit is what the first left). Each row's rank is its place by wake-up
// among those claimed. $1 the session to claim ("" any), $2 the limit.
const claimSQL = `WITH lapsed AS (
		SELECT id, woken_at FROM sessions
		WHERE wake_seq > handled_wake_seq AND lease_expires_at <= now() AND ($1 = '' OR id = $1)
		ORDER BY lease_expires_at LIMIT $2 FOR UPDATE SKIP LOCKED
	), unleased AS (
		SELECT id, woken_at FROM sessions
		WHERE wake_seq > handled_wake_seq AND lease_expires_at IS NULL AND ($1 = '' OR id = $1)
		ORDER BY woken_at, id LIMIT $2 - (SELECT count(*) FROM lapsed) FOR UPDATE SKIP LOCKED
	)
	SELECT id, row_number() OVER (ORDER BY woken_at, id) AS rank
	FROM (SELECT id, woken_at FROM lapsed UNION ALL SELECT id, woken_at FROM unleased) c`

// LeaseClaim claims up to p.Limit runnable sessions whose lease is free or lapsed (claimSQL), and returns them
// woken longest ago first.
func (s *Store) LeaseClaim(ctx context.Context, p *store.LeaseClaimParams) ([]*store.Lease, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	limit, err := p.ClaimLimit()
	if err != nil {
		return nil, fmt.Errorf("lease claim: %w", err)
	}
	tokens := make([]string, limit)
	for i := range tokens {
		tokens[i] = newToken()
	}
	// Each claimed row takes the token at its rank among the claimed rows.
	rows, err := s.pool.Query(ctx, `WITH c AS (`+claimSQL+`)
		UPDATE sessions s SET lease_owner = $3, lease_token = ($5::text[])[c.rank],
			lease_expires_at = now() + $4 * interval '1 microsecond'
		FROM c
		WHERE s.id = c.id
		RETURNING c.rank, s.id, s.lease_token, s.lease_expires_at, s.wake_seq`,
		p.SessionID, limit, p.Owner, p.TTL.Microseconds(), tokens)
	if err != nil {
		return nil, s.dbErr("lease claim", err)
	}
	leases := make([]*store.Lease, limit)
	n := 0
	for rows.Next() {
		var rank int
		l := &store.Lease{Owner: p.Owner}
		if err := rows.Scan(&rank, &l.SessionID, &l.Token, &l.ExpiresAt, &l.WakeSeq); err != nil {
			rows.Close()
			return nil, s.dbErr("lease claim", err)
		}
		if rank < 1 || rank > limit || leases[rank-1] != nil {
			rows.Close()
			return nil, fmt.Errorf("lease claim: row ranked %d of %d", rank, limit)
		}
		l.ExpiresAt = l.ExpiresAt.UTC()
		leases[rank-1] = l // oldest wake-up first, as the caller hands them out
		n++
	}
	if err := rows.Err(); err != nil {
		return nil, s.dbErr("lease claim", err)
	}
	leases = leases[:n]
	if len(leases) == 0 {
		if p.SessionID != "" {
			if err := s.exists(ctx, "sessions", p.SessionID); err != nil {
				return nil, s.dbErr("lease claim", err)
			}
		}
		return nil, fmt.Errorf("lease claim: %w", store.ErrNoWork)
	}
	return leases, nil
}

// LeaseRenew extends an unexpired lease by ttl from now and refreshes its WakeSeq.
func (s *Store) LeaseRenew(ctx context.Context, l *store.Lease, ttl time.Duration) (*store.Lease, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("lease renew: ttl %v must be positive", ttl)
	}
	renewed := *l
	err := s.pool.QueryRow(ctx, `UPDATE sessions SET lease_expires_at = now() + $3 * interval '1 microsecond'
		WHERE id = $1 AND lease_token = $2 AND lease_expires_at > now()
		RETURNING lease_expires_at, wake_seq`, l.SessionID, l.Token, ttl.Microseconds()).
		Scan(&renewed.ExpiresAt, &renewed.WakeSeq)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("lease renew: %w", store.ErrLeaseLost)
	}
	if err != nil {
		return nil, s.dbErr("lease renew", err)
	}
	renewed.ExpiresAt = renewed.ExpiresAt.UTC()
	return &renewed, nil
}

// LeaseRelease frees the session, counting wake-ups up to l.WakeSeq as handled. A session woken since stays
// runnable, and brains everywhere are told so.
func (s *Store) LeaseRelease(ctx context.Context, l *store.Lease) error {
	if err := s.check(); err != nil {
		return err
	}
	var runnable bool
	err := s.pool.QueryRow(ctx, `WITH r AS (
			UPDATE sessions SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
				handled_wake_seq = GREATEST(handled_wake_seq, LEAST($3, wake_seq))
			WHERE id = $1 AND lease_token = $2 AND lease_expires_at > now()
			RETURNING wake_seq > handled_wake_seq AS runnable
		)
		SELECT runnable, CASE WHEN runnable THEN pg_notify($4, $1) END FROM r`,
		l.SessionID, l.Token, l.WakeSeq, s.runnableChannel).Scan(&runnable, nil)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("lease release: %w", store.ErrLeaseLost)
	}
	if err != nil {
		return s.dbErr("lease release", err)
	}
	if runnable {
		s.hub.NotifyRunnable()
	}
	return nil
}

// WaitRunnable returns a channel woken whenever some session may have become runnable, in any process.
func (s *Store) WaitRunnable() (<-chan struct{}, func()) {
	return s.hub.WaitRunnable()
}

// newToken returns a random lease token.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails.
	return hex.EncodeToString(b[:])
}
