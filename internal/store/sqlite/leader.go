package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/store"
)

// LeaderAcquire takes the named leader lease if it is free or expired.
func (s *Store) LeaderAcquire(ctx context.Context, p *store.LeaderAcquireParams) (*store.Leader, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	var l *store.Leader
	err := s.write(ctx, func(w *wtx) error {
		now := time.Now()
		expires := now.Add(p.TTL).UTC().Truncate(time.Microsecond)
		token := newToken()
		n, err := w.execN(`INSERT INTO leaders (name, owner, token, expires_at) VALUES (?1, ?2, ?3, ?4)
			ON CONFLICT (name) DO UPDATE SET owner = ?2, token = ?3, expires_at = ?4 WHERE leaders.expires_at <= ?5`,
			p.Name, p.Owner, token, micros(expires), micros(now))
		if err != nil {
			return err
		}
		if n == 0 {
			return store.ErrConflict
		}
		l = &store.Leader{Name: p.Name, Owner: p.Owner, Token: token, ExpiresAt: expires}
		return nil
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlite: acquire leader %s: %w", p.Name, err)
	}
	return l, nil
}

// LeaderRenew extends a held leader lease by ttl from now; ErrLeaseLost once it expired or changed hands.
func (s *Store) LeaderRenew(ctx context.Context, l *store.Leader, ttl time.Duration) (*store.Leader, error) {
	if ttl <= 0 {
		return nil, fmt.Errorf("sqlite: renew leader: ttl must be > 0, got %s", ttl)
	}
	var renewed *store.Leader
	err := s.write(ctx, func(w *wtx) error {
		now := time.Now()
		expires := now.Add(ttl).UTC().Truncate(time.Microsecond)
		n, err := w.execN(`UPDATE leaders SET expires_at = ? WHERE name = ? AND token = ? AND expires_at > ?`,
			micros(expires), l.Name, l.Token, micros(now))
		if err != nil {
			return err
		}
		if n == 0 {
			return store.ErrLeaseLost
		}
		r := *l
		r.ExpiresAt = expires
		renewed = &r
		return nil
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlite: renew leader %s: %w", l.Name, err)
	}
	return renewed, nil
}

// LeaderRelease frees a leader lease this holder still has (expired or not, if no one took it over).
func (s *Store) LeaderRelease(ctx context.Context, l *store.Leader) error {
	err := s.write(ctx, func(w *wtx) error {
		n, err := w.execN(`DELETE FROM leaders WHERE name = ? AND token = ?`, l.Name, l.Token)
		if err != nil {
			return err
		}
		if n == 0 {
			return store.ErrLeaseLost
		}
		return nil
	}, nil)
	if err != nil {
		return fmt.Errorf("sqlite: release leader %s: %w", l.Name, err)
	}
	return nil
}
