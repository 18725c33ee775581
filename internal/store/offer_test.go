package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/store"
)

// TestClaimOfferRoom: every unit of room comes back once, as Withdraw's count or as a value on C, and the
// capacity bounds the room, the takes in flight and the undelivered values together, so Deliver never blocks.
func TestClaimOfferRoom(t *testing.T) {
	o := store.NewClaimOffer("brain", time.Minute, 3)
	if o.Take() {
		t.Fatal("Take succeeded on an offer with no room")
	}
	if n := o.Open(5); n != 3 {
		t.Fatalf("Open(5) with capacity 3 added %d", n)
	}
	for i := range 2 {
		if !o.Take() {
			t.Fatalf("take %d failed with room left", i+1)
		}
	}
	if n := o.Open(1); n != 0 {
		t.Fatalf("Open added %d beyond the capacity (1 room, 2 takes in flight)", n)
	}
	l := &store.Lease{SessionID: "s1"}
	o.Deliver(l)
	o.Deliver(nil)
	if n := o.Open(1); n != 0 {
		t.Fatalf("Open added %d while two values wait on C", n)
	}
	if got := <-o.C(); got != l {
		t.Fatalf("first value %+v, want the lease", got)
	}
	if got := <-o.C(); got != nil {
		t.Fatalf("second value %+v, want nil", got)
	}
	if n := o.Withdraw(); n != 1 {
		t.Fatalf("Withdraw returned %d, want 1", n)
	}
	if o.Take() {
		t.Fatal("Take succeeded after Withdraw")
	}

	// Settle waits for the takes in flight and returns the leases delivered but not received.
	if n := o.Open(2); n != 2 {
		t.Fatalf("Open(2) added %d", n)
	}
	o.Take()
	o.Take()
	o.Deliver(&store.Lease{SessionID: "s2"})
	go func() {
		time.Sleep(20 * time.Millisecond)
		o.Deliver(&store.Lease{SessionID: "s3"})
	}()
	got := o.Settle(context.Background())
	if len(got) != 2 || got[0].SessionID != "s2" || got[1].SessionID != "s3" {
		t.Fatalf("Settle returned %+v, want s2 and s3", got)
	}
	if o.Room() != 0 {
		t.Errorf("room after Settle: %d", o.Room())
	}
}

// TestClaimOfferSettleGivesUp: a take that never ends does not hold a stopping brain past its context; Settle
// returns the leases delivered so far.
func TestClaimOfferSettleGivesUp(t *testing.T) {
	o := store.NewClaimOffer("brain", time.Minute, 2)
	o.Open(2)
	o.Take()
	o.Take()
	o.Deliver(&store.Lease{SessionID: "s1"}) // the other take never ends
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	got := o.Settle(ctx)
	if len(got) != 1 || got[0].SessionID != "s1" {
		t.Fatalf("Settle returned %+v, want s1", got)
	}
	if ctx.Err() == nil {
		t.Fatal("Settle returned before its context ended, with a take still in flight")
	}
}
