package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
)

// TestOfferedClaims: a client's append that makes a session runnable claims it for an offer with room, in its
// own transaction; the lease is the session's and fences like a claimed one. A held session, a brain's own
// append and an offer without room take nothing, and the session stays runnable for a claim.
func TestOfferedClaims(t *testing.T) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	msg, err := apitype.MakeEvent(apitype.EventUserMessage, apitype.UserMessage{Content: []apitype.ContentBlock{apitype.TextBlock("go")}})
	if err != nil {
		t.Fatal(err)
	}
	newSession := func(initial ...apitype.NewEvent) string {
		t.Helper()
		now := apitype.Now()
		sess := &apitype.Session{Type: apitype.ObjectSession, ID: apitype.NewID(apitype.PrefixSession), Status: apitype.StatusIdle, CreatedAt: now, UpdatedAt: now}
		if _, _, err := s.SessionCreate(ctx, &store.SessionCreateParams{Session: sess, InitialEvents: initial}); err != nil {
			t.Fatal(err)
		}
		return sess.ID
	}
	send := func(id string) {
		t.Helper()
		if _, err := s.EventAppend(ctx, &store.EventAppendParams{SessionID: id, Events: []apitype.NewEvent{msg}, Wake: true, Open: true}); err != nil {
			t.Fatal(err)
		}
	}
	delivered := func(o *store.ClaimOffer) *store.Lease {
		t.Helper()
		select {
		case l := <-o.C():
			return l
		case <-time.After(10 * time.Second):
			t.Fatal("the take was never delivered")
			return nil
		}
	}
	runnable, stopWaiting := s.WaitRunnable()
	defer stopWaiting()
	woken := func() bool {
		select {
		case <-runnable:
			return true
		default:
			return false
		}
	}

	o := store.NewClaimOffer("brain-a", time.Minute, 4)
	stop := s.OfferClaims(o)
	defer stop()
	if got := o.Open(10); got != 4 {
		t.Fatalf("Open(10) on an offer of capacity 4 added %d", got)
	}

	// A session created with its first message, and one sent a message: each claimed by the append.
	created := newSession(msg)
	l := delivered(o)
	if l == nil || l.SessionID != created || l.Owner != "brain-a" || l.WakeSeq != 1 {
		t.Fatalf("lease of the created session = %+v", l)
	}
	idle := newSession()
	send(idle)
	l2 := delivered(o)
	if l2 == nil || l2.SessionID != idle || l2.WakeSeq != 1 {
		t.Fatalf("lease of the woken session = %+v", l2)
	}
	if woken() {
		t.Error("a session the append claimed woke the runnable waiters")
	}
	if _, err := s.LeaseClaim(ctx, &store.LeaseClaimParams{Owner: "brain-b", TTL: time.Minute, Limit: 10}); !errors.Is(err, store.ErrNoWork) {
		t.Fatalf("claim after the offered claims: %v, want ErrNoWork", err)
	}
	// The lease fences: it renews and releases; a second message while it is held is not taken.
	if l2, err = s.LeaseRenew(ctx, l2, time.Minute); err != nil {
		t.Fatal(err)
	}
	send(idle)
	if got := delivered(o); got != nil {
		t.Fatalf("a held session was claimed again: %+v", got)
	}
	if !woken() {
		t.Error("a message to a held session did not wake the runnable waiters")
	}
	if err := s.LeaseRelease(ctx, l2); err != nil {
		t.Fatal(err)
	}
	ls, err := s.LeaseClaim(ctx, &store.LeaseClaimParams{Owner: "brain-b", TTL: time.Minute, SessionID: idle})
	if err != nil || len(ls) != 1 || ls[0].WakeSeq != 2 {
		t.Fatalf("claim of the session woken while held: %v, %v", ls, err)
	}
	// A brain's own append with a lease takes nothing.
	if _, err := s.EventAppend(ctx, &store.EventAppendParams{SessionID: idle, Events: []apitype.NewEvent{msg}, Wake: true, Lease: ls[0]}); err != nil {
		t.Fatal(err)
	}
	if err := s.LeaseRelease(ctx, ls[0]); err != nil {
		t.Fatal(err)
	}

	// Room: 4 opened, 3 taken (two leases and one nil). One left, then none.
	if got := o.Withdraw(); got != 1 {
		t.Fatalf("Withdraw returned %d, want the 1 unit left", got)
	}
	other := newSession()
	send(other)
	if !woken() {
		t.Error("an append with no room in the offer did not wake the runnable waiters")
	}
	if ls, err := s.LeaseClaim(ctx, &store.LeaseClaimParams{Owner: "brain-b", TTL: time.Minute, SessionID: other}); err != nil || len(ls) != 1 {
		t.Fatalf("claim of a session no offer took: %v, %v", ls, err)
	}

	// Settle hands back what was delivered and not received; after stop, appends take nothing.
	o.Open(1)
	late := newSession(msg)
	settled := o.Settle(ctx)
	if len(settled) != 1 || settled[0].SessionID != late {
		t.Fatalf("Settle returned %+v, want the lease of %s", settled, late)
	}
	stop()
	o.Open(1)
	newSession(msg)
	if got := o.Withdraw(); got != 1 {
		t.Errorf("an append took room in a stopped offer (%d left of 1)", got)
	}
}
