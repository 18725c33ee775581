package sqlite

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/store"
)

// The sessions a brain may claim (?2, if not empty, the one it asks for) at ?1: runnable, holding no lease or
// one that lapsed by then. Each part is a search of sessions_claimable: those holding none in the order they were
// woken, those whose lease lapsed by the range of their lapse (few: a brain that died). claimableSQL takes ?3 of
// them, those whose lease lapsed first (by when), then those holding none (woken longest ago first), as the
// PostgreSQL adapter does, and returns them woken longest ago first.
const (
	claimableNone   = `FROM sessions INDEXED BY sessions_claimable WHERE wake_seq > handled_wake_seq AND lease_expires_at IS NULL AND (?2 = '' OR id = ?2)`
	claimableLapsed = `FROM sessions INDEXED BY sessions_claimable WHERE wake_seq > handled_wake_seq AND lease_expires_at <= ?1 AND (?2 = '' OR id = ?2)`

	claimableLookSQL = `SELECT EXISTS (SELECT 1 ` + claimableNone + `) OR EXISTS (SELECT 1 ` + claimableLapsed + `)`
	claimableSQL     = `SELECT id, wake_seq FROM (
		SELECT * FROM (SELECT id, wake_seq, woken_at, 0 AS part ` + claimableLapsed + ` ORDER BY lease_expires_at LIMIT ?3)
		UNION ALL
		SELECT * FROM (SELECT id, wake_seq, woken_at, 1 AS part ` + claimableNone + ` ORDER BY woken_at, id LIMIT ?3)
		ORDER BY part, woken_at, id LIMIT ?3)
		ORDER BY woken_at, id`
)

// LeaseClaim claims up to p.Limit runnable sessions whose lease is free or expired, those woken longest ago first.
func (s *Store) LeaseClaim(ctx context.Context, p *store.LeaseClaimParams) ([]*store.Lease, error) {
	limit, err := p.ClaimLimit()
	if err != nil {
		return nil, fmt.Errorf("sqlite: claim lease: %w", err)
	}
	// Brains poll: look on the read pool first, so that a poll with nothing to claim costs the writer nothing. A
	// session woken just after the look is found by the next poll, which the wake-up triggers.
	var found bool
	err = s.readRow(ctx, claimableLookSQL, micros(time.Now()), p.SessionID).Scan(&found)
	if err != nil {
		return nil, s.readErr("claim lease", err)
	}
	if !found {
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
		rows, err := w.query(claimableSQL, micros(now), p.SessionID, limit)
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

// offers are the claim offers of the brains in this process (store.ClaimsOffered).
type offers struct {
	mu   sync.Mutex
	list []*store.ClaimOffer
}

// take reserves room in the first offer that has some, and returns it (nil: none has).
func (o *offers) take() *store.ClaimOffer {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, c := range o.list {
		if c.Take() {
			return c
		}
	}
	return nil
}

// OfferClaims lets the appends that make a session runnable claim it for o in their own transaction.
func (s *Store) OfferClaims(o *store.ClaimOffer) (stop func()) {
	s.offers.mu.Lock()
	s.offers.list = append(s.offers.list, o)
	s.offers.mu.Unlock()
	return func() {
		s.offers.mu.Lock()
		defer s.offers.mu.Unlock()
		s.offers.list = slices.DeleteFunc(s.offers.list, func(c *store.ClaimOffer) bool { return c == o })
	}
}

var _ store.ClaimsOffered = (*Store)(nil)

// offeredClaim is an append's claim for an in-process brain's offer (OfferClaims): made in the append's
// transaction when the append made the session runnable and an offer has room, handed over once the append has
// committed (committed) or given back if it did not (failed). Its methods run on the writer goroutine.
type offeredClaim struct {
	offer *store.ClaimOffer // the offer a take was made in, if any
	lease *store.Lease      // what the take claimed, if anything
}

// claim claims the session for an offer with room, in w's transaction, if its lease is free or expired.
func (c *offeredClaim) claim(w *wtx, sessionID string) error {
	if c.offer = w.s.offers.take(); c.offer == nil {
		return nil
	}
	var err error
	c.lease, err = claimOffered(w, sessionID, c.offer)
	return err
}

// committed ends the take with its lease, and reports whether the append claimed the session (then no runnable
// waiter need look for it).
func (c *offeredClaim) committed() bool {
	if c.offer != nil {
		c.offer.Deliver(c.lease)
	}
	return c.lease != nil
}

// failed ends the take of an append that did not commit: it claimed nothing.
func (c *offeredClaim) failed() {
	if c.offer != nil {
		c.offer.Deliver(nil)
	}
}

// claimOffered claims the session for o, in w's transaction, if it is runnable and its lease is free or
// expired; nil if not.
func claimOffered(w *wtx, sessionID string, o *store.ClaimOffer) (*store.Lease, error) {
	now := time.Now()
	l := &store.Lease{SessionID: sessionID, Owner: o.Owner, Token: newToken(),
		ExpiresAt: now.Add(o.TTL).UTC().Truncate(time.Microsecond)}
	err := w.queryRow(`UPDATE sessions SET lease_owner = ?1, lease_token = ?2, lease_expires_at = ?3
		WHERE id = ?4 AND wake_seq > handled_wake_seq AND (lease_token IS NULL OR lease_expires_at <= ?5)
		RETURNING wake_seq`, l.Owner, l.Token, micros(l.ExpiresAt), sessionID, micros(now)).Scan(&l.WakeSeq)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return l, nil
}
