package storetest

import (
	"testing"
	"time"

	"github.com/corralhq/corral/internal/store"
)

// testLeader: a leader lease is held by one owner at a time; the holder renews it with its token; after it
// expires another owner takes it with a new token, and the stale holder's renewal and release fail with
// ErrLeaseLost; a released lease is free at once.
func testLeader(t *testing.T, h Harness) {
	s := h.open(t)
	acquire := func(name, owner string, ttl time.Duration) (*store.Leader, error) {
		return s.LeaderAcquire(ctxBg, &store.LeaderAcquireParams{Name: name, Owner: owner, TTL: ttl})
	}
	a, err := acquire("sweeps", "proc-a", shortTTL)
	must(t, err, "a acquires")
	equal(t, a.Name, "sweeps", "name")
	equal(t, a.Owner, "proc-a", "owner")
	if a.Token == "" {
		t.Fatal("empty leader token")
	}
	if !a.ExpiresAt.After(time.Now()) {
		t.Fatalf("leader lease expires at %v, in the past", a.ExpiresAt)
	}
	_, err = acquire("sweeps", "proc-b", time.Minute)
	mustIs(t, err, store.ErrConflict, "b acquires while a's lease is live")
	_, err = acquire("sweeps", "proc-a", time.Minute)
	mustIs(t, err, store.ErrConflict, "a acquires again while its own lease is live")
	// Names are independent.
	other, err := acquire("cron", "proc-b", time.Minute)
	must(t, err, "b acquires another name")
	if _, err := acquire("", "proc-b", time.Minute); err == nil {
		t.Error("acquire without a name succeeded")
	}
	if _, err := acquire("x", "proc-b", 0); err == nil {
		t.Error("acquire with ttl 0 succeeded")
	}

	r, err := s.LeaderRenew(ctxBg, a, shortTTL)
	must(t, err, "a renews")
	equal(t, r.Token, a.Token, "renewal keeps the token")
	if r.ExpiresAt.Before(a.ExpiresAt) {
		t.Errorf("renewed lease expires at %v, before %v", r.ExpiresAt, a.ExpiresAt)
	}
	forged := *r
	forged.Token = "not-the-token"
	_, err = s.LeaderRenew(ctxBg, &forged, time.Minute)
	mustIs(t, err, store.ErrLeaseLost, "renew with a wrong token")
	mustIs(t, s.LeaderRelease(ctxBg, &forged), store.ErrLeaseLost, "release with a wrong token")

	// Expired: a's renewal fails even before anyone takes over, and b takes it with a token of its own.
	time.Sleep(time.Until(r.ExpiresAt) + 50*time.Millisecond)
	_, err = s.LeaderRenew(ctxBg, r, time.Minute)
	mustIs(t, err, store.ErrLeaseLost, "a renews after expiry")
	b, err := acquire("sweeps", "proc-b", time.Minute)
	must(t, err, "b acquires the expired lease")
	if b.Token == a.Token {
		t.Fatal("the new holder got the old token")
	}
	equal(t, b.Owner, "proc-b", "new owner")
	_, err = s.LeaderRenew(ctxBg, r, time.Minute)
	mustIs(t, err, store.ErrLeaseLost, "stale a renews after the takeover")
	mustIs(t, s.LeaderRelease(ctxBg, r), store.ErrLeaseLost, "stale a releases after the takeover")
	_, err = s.LeaderRenew(ctxBg, b, time.Minute)
	must(t, err, "b renews")

	// Released: free at once.
	must(t, s.LeaderRelease(ctxBg, b), "b releases")
	mustIs(t, s.LeaderRelease(ctxBg, b), store.ErrLeaseLost, "b releases twice")
	c, err := acquire("sweeps", "proc-c", time.Minute)
	must(t, err, "c acquires the released lease")
	must(t, s.LeaderRelease(ctxBg, c), "c releases")
	must(t, s.LeaderRelease(ctxBg, other), "b releases the other name")
}
