package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/corralhq/corral/internal/store"
)

// LeaseClaim claims the runnable session woken longest ago whose lease is free or expired. Rows another claimer
// holds locked are skipped, so concurrent brains in any process never claim the same session.
func (s *Store) LeaseClaim(ctx context.Context, p *store.LeaseClaimParams) (*store.Lease, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if p.TTL <= 0 {
		return nil, fmt.Errorf("lease claim: ttl %v must be positive", p.TTL)
	}
	var q query
	token := newToken()
	fmt.Fprintf(&q.sql, `UPDATE sessions s SET lease_owner = %s, lease_token = %s,
			lease_expires_at = now() + %s * interval '1 microsecond'
		FROM (
			SELECT id FROM sessions
			WHERE wake_seq > handled_wake_seq AND (lease_expires_at IS NULL OR lease_expires_at <= now())`,
		q.arg(p.Owner), q.arg(token), q.arg(p.TTL.Microseconds()))
	if p.SessionID != "" {
		fmt.Fprintf(&q.sql, " AND id = %s", q.arg(p.SessionID))
	}
	q.sql.WriteString(` ORDER BY woken_at, id LIMIT 1 FOR UPDATE SKIP LOCKED
		) c
		WHERE s.id = c.id
		RETURNING s.id, s.lease_expires_at, s.wake_seq`)
	l := &store.Lease{Owner: p.Owner, Token: token}
	err := s.pool.QueryRow(ctx, q.sql.String(), q.args...).Scan(&l.SessionID, &l.ExpiresAt, &l.WakeSeq)
	if errors.Is(err, pgx.ErrNoRows) && p.SessionID != "" {
		if err := s.exists(ctx, "sessions", p.SessionID); err != nil {
			return nil, s.dbErr("lease claim", err)
		}
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("lease claim: %w", store.ErrNoWork)
	}
	if err != nil {
		return nil, s.dbErr("lease claim", err)
	}
	l.ExpiresAt = l.ExpiresAt.UTC()
	return l, nil
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
