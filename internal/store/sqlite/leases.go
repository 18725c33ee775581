package sqlite

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/store"
)

// LeaseClaim claims up to p.Limit runnable sessions whose lease is free or expired, those woken longest ago first.
func (s *Store) LeaseClaim(ctx context.Context, p *store.LeaseClaimParams) ([]*store.Lease, error) {
	limit, err := p.ClaimLimit()
	if err != nil {
		return nil, fmt.Errorf("sqlite: claim lease: %w", err)
	}
	// Brains poll: look on the read pool first, so that a poll with nothing to claim costs the writer nothing. A
	// session woken just after the look is found by the next poll, which the wake-up triggers.
	var found int
	err = s.readRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM sessions WHERE wake_seq > handled_wake_seq
		AND (lease_token IS NULL OR lease_expires_at <= ?) AND (?2 = '' OR id = ?2) LIMIT 1)`,
		micros(time.Now()), p.SessionID).Scan(&found)
	if err != nil {
		return nil, s.readErr("claim lease", err)
	}
	if found == 0 {
		if p.SessionID != "" {
			var one int
			err := s.readRow(ctx, `SELECT 1 FROM sessions WHERE id = ?`, p.SessionID).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				return nil, fmt.Errorf("sqlite: claim lease on %s: %w", p.SessionID, store.ErrNotFound)
			}
			if err != nil {
				return nil, s.readErr("claim lease", err)
			}
		}
		return nil, fmt.Errorf("sqlite: claim lease: %w", store.ErrNoWork)
	}

	var leases []*store.Lease
	err = s.write(ctx, func(w *wtx) error {
		leases = leases[:0]
		now := time.Now()
		rows, err := w.query(`SELECT id, wake_seq FROM sessions WHERE wake_seq > handled_wake_seq
			AND (lease_token IS NULL OR lease_expires_at <= ?1) AND (?2 = '' OR id = ?2)
			ORDER BY woken_at, id LIMIT ?3`, micros(now), p.SessionID, limit)
		if err != nil {
			return err
		}
		expires := now.Add(p.TTL).UTC().Truncate(time.Microsecond)
		for rows.Next() {
			l := &store.Lease{Owner: p.Owner, Token: newToken(), ExpiresAt: expires}
			if err := rows.Scan(&l.SessionID, &l.WakeSeq); err != nil {
				rows.Close()
				return err
			}
			leases = append(leases, l)
		}
		if err := cmp.Or(rows.Err(), rows.Close()); err != nil {
			return err
		}
		if len(leases) == 0 {
			return store.ErrNoWork
		}
		for _, l := range leases {
			if _, err := w.exec(`UPDATE sessions SET lease_owner = ?, lease_token = ?, lease_expires_at = ? WHERE id = ?`,
				l.Owner, l.Token, micros(expires), l.SessionID); err != nil {
				return err
			}
		}
		return nil
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlite: claim lease: %w", err)
	}
	return leases, nil
}

// LeaseRenew extends a held lease by ttl from now and refreshes its WakeSeq.
func (s *Store) LeaseRenew(ctx context.Context, l *store.Lease, ttl time.Duration) (*store.Lease, error) {
	if ttl <= 0 {
		return nil, fmt.Errorf("sqlite: renew lease: ttl must be > 0, got %s", ttl)
	}
	var renewed *store.Lease
	err := s.write(ctx, func(w *wtx) error {
		now := time.Now()
		wakeSeq, err := checkLease(w, l, now)
		if err != nil {
			return err
		}
		expires := now.Add(ttl).UTC().Truncate(time.Microsecond)
		if _, err := w.exec(`UPDATE sessions SET lease_expires_at = ? WHERE id = ?`,
			micros(expires), l.SessionID); err != nil {
			return err
		}
		r := *l
		r.ExpiresAt, r.WakeSeq = expires, wakeSeq
		renewed = &r
		return nil
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlite: renew lease on %s: %w", l.SessionID, err)
	}
	return renewed, nil
}

// LeaseRelease gives the session up; wake-ups up to l.WakeSeq count as handled. If the session was woken since,
// it stays runnable and runnable waiters are woken.
func (s *Store) LeaseRelease(ctx context.Context, l *store.Lease) error {
	var runnable bool
	err := s.write(ctx, func(w *wtx) error {
		wakeSeq, err := checkLease(w, l, time.Now())
		if err != nil {
			return err
		}
		if _, err := w.exec(`UPDATE sessions SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
			handled_wake_seq = max(handled_wake_seq, ?) WHERE id = ?`, l.WakeSeq, l.SessionID); err != nil {
			return err
		}
		runnable = wakeSeq > l.WakeSeq
		return nil
	}, func() {
		if runnable {
			s.hub.NotifyRunnable()
		}
	})
	if err != nil {
		return fmt.Errorf("sqlite: release lease on %s: %w", l.SessionID, err)
	}
	return nil
}

// WaitRunnable returns a channel woken when a session may have become runnable through this Store.
func (s *Store) WaitRunnable() (<-chan struct{}, func()) {
	return s.hub.WaitRunnable()
}

// checkLease returns the session's wake_seq if l is its current, unexpired lease.
func checkLease(w *wtx, l *store.Lease, now time.Time) (int64, error) {
	var wakeSeq int64
	var token sql.NullString
	var expires sql.NullInt64
	err := w.queryRow(`SELECT wake_seq, lease_token, lease_expires_at FROM sessions WHERE id = ?`, l.SessionID).
		Scan(&wakeSeq, &token, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, store.ErrNotFound
	}
	if err != nil {
		return 0, err
	}
	if !leaseHeld(l, token, expires, now) {
		return 0, store.ErrLeaseLost
	}
	return wakeSeq, nil
}

// newToken returns a random lease token.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails.
	return hex.EncodeToString(b[:])
}

// leaseHeld reports whether l is the session's current lease (token and expiry as stored) at now.
func leaseHeld(l *store.Lease, token sql.NullString, expires sql.NullInt64, now time.Time) bool {
	return token.Valid && token.String == l.Token && expires.Valid && expires.Int64 > micros(now)
}
