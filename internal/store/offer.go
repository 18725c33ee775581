package store

import (
	"context"
	"sync"
	"time"
)

// ClaimsOffered is implemented by adapters that can claim a session for an in-process brain in the very
// transaction of the client's append that makes it runnable (sqlite). The brain then works the session without
// a claim of its own: no wake-up of its claimer and no write of its own (a commit, with its fsync) stand between
// the client's event and the brain's first read of the log. OfferClaims registers o until the returned stop is
// called; after stop returns, no append takes room in o any more (takes already made still end with Deliver).
type ClaimsOffered interface {
	OfferClaims(o *ClaimOffer) (stop func())
}

// ClaimOffer is a brain's standing offer to work sessions as they become runnable: room for so many sessions,
// each taken by an append (EventAppend with Wake and no Lease) that makes a session runnable while its lease is
// free, in the append's transaction, with a lease for Owner of TTL. A take ends once its transaction has: with
// the lease on C if it committed and claimed the session, with nil on C otherwise (the session was held, or the
// transaction failed). The brain gives room only for workers it holds idle, and takes back what is left with
// Withdraw; every unit of room comes back exactly once, as what Withdraw returns or as a value on C.
type ClaimOffer struct {
	Owner string
	TTL   time.Duration

	mu    sync.Mutex
	room  int // sessions appends may still take
	taken int // takes whose transaction has not ended
	c     chan *Lease
}

// NewClaimOffer returns an offer with no room that holds at most capacity units of room, takes and undelivered
// values at once.
func NewClaimOffer(owner string, ttl time.Duration, capacity int) *ClaimOffer {
	return &ClaimOffer{Owner: owner, TTL: ttl, c: make(chan *Lease, capacity)}
}

// Open adds up to n units of room, as many as the offer's capacity leaves, and returns how many it added.
func (o *ClaimOffer) Open(n int) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n = max(min(n, cap(o.c)-o.room-o.taken-len(o.c)), 0)
	o.room += n
	return n
}

// Withdraw takes back the room no append has taken, and returns it. Takes in flight still end on C.
func (o *ClaimOffer) Withdraw() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := o.room
	o.room = 0
	return n
}

// Room is the room no append has taken yet.
func (o *ClaimOffer) Room() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.room
}

// C delivers the ends of the takes: a lease claimed for the brain, or nil for a take that claimed nothing.
func (o *ClaimOffer) C() <-chan *Lease { return o.c }

// Settle withdraws the room and waits until every take in flight has ended (or ctx is done); it returns the
// leases delivered and not yet received, for a stopping brain to give back. Nothing else may receive from C
// meanwhile.
func (o *ClaimOffer) Settle(ctx context.Context) []*Lease {
	o.mu.Lock()
	o.room = 0
	pending := o.taken + len(o.c) // no take starts now: each of these is a value C has or will have
	o.mu.Unlock()
	var out []*Lease
	for range pending {
		select {
		case <-ctx.Done():
			return out
		case l := <-o.c:
			if l != nil {
				out = append(out, l)
			}
		}
	}
	return out
}

// Take reserves a unit of room for an append about to claim a session, and reports whether there was one. The
// adapter ends every successful Take with one Deliver.
func (o *ClaimOffer) Take() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.room == 0 {
		return false
	}
	o.room--
	o.taken++
	return true
}

// Deliver ends a Take: l is the lease its committed transaction claimed, or nil. It never blocks: the offer's
// capacity bounds the values in flight.
func (o *ClaimOffer) Deliver(l *Lease) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.taken--
	o.c <- l
}
