package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/store"
	"github.com/jackc/pgx/v5"
)

// LeaderAcquire takes the named leader lease if it is free or expired, by the database's clock.
func (s *Store) LeaderAcquire(ctx context.Context, p *store.LeaderAcquireParams) (*store.Leader, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	l := &store.Leader{Name: p.Name, Owner: p.Owner, Token: newToken()}
	err := s.pool.QueryRow(ctx, `INSERT INTO leaders (name, owner, token, expires_at)
		VALUES ($1, $2, $3, now() + $4 * interval '1 microsecond')
		ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, token = excluded.token, expires_at = excluded.expires_at
		WHERE leaders.expires_at <= now()
		RETURNING expires_at`, p.Name, p.Owner, l.Token, p.TTL.Microseconds()).Scan(&l.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("leader acquire %s: %w", p.Name, store.ErrConflict)
	}
	if err != nil {
		return nil, s.dbErr("leader acquire", err)
	}
	l.ExpiresAt = l.ExpiresAt.UTC()
	return l, nil
}

// LeaderRenew extends a held leader lease by ttl from now; ErrLeaseLost once it expired or changed hands.
func (s *Store) LeaderRenew(ctx context.Context, l *store.Leader, ttl time.Duration) (*store.Leader, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("leader renew: ttl %v must be positive", ttl)
	}
	renewed := *l
	err := s.pool.QueryRow(ctx, `UPDATE leaders SET expires_at = now() + $3 * interval '1 microsecond'
		WHERE name = $1 AND token = $2 AND expires_at > now()
		RETURNING expires_at`, l.Name, l.Token, ttl.Microseconds()).Scan(&renewed.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("leader renew %s: %w", l.Name, store.ErrLeaseLost)
	}
	if err != nil {
		return nil, s.dbErr("leader renew", err)
	}
	renewed.ExpiresAt = renewed.ExpiresAt.UTC()
	return &renewed, nil
}

// LeaderRelease frees a leader lease this holder still has (expired or not, if no one took it over).
func (s *Store) LeaderRelease(ctx context.Context, l *store.Leader) error {
	if err := s.check(); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM leaders WHERE name = $1 AND token = $2`, l.Name, l.Token)
	if err != nil {
		return s.dbErr("leader release", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("leader release %s: %w", l.Name, store.ErrLeaseLost)
	}
	return nil
}
