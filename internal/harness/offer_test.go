package harness_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
)

// offerSpy is the fixture's store, counting the leases the brain's own claims took and keeping the claim offer
// the brain registers.
type offerSpy struct {
	*sqlite.Store
	claimed atomic.Int64
	mu      sync.Mutex
	offer   *store.ClaimOffer
}

func (s *offerSpy) LeaseClaim(ctx context.Context, p *store.LeaseClaimParams) ([]*store.Lease, error) {
	ls, err := s.Store.LeaseClaim(ctx, p)
	s.claimed.Add(int64(len(ls)))
	return ls, err
}

func (s *offerSpy) OfferClaims(o *store.ClaimOffer) func() {
	s.mu.Lock()
	s.offer = o
	s.mu.Unlock()
	return s.Store.OfferClaims(o)
}

// waitRoom waits until the brain's offer has room: its dispatcher is waiting for a wake-up with idle workers.
func (s *offerSpy) waitRoom(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		o := s.offer
		s.mu.Unlock()
		if o != nil && o.Room() > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the brain never offered its idle workers")
		}
	}
}

// TestOfferedSessionsRun: with a store that takes claim offers, a brain waiting for work takes each session its
// client's message makes runnable from the append itself, without a claim of its own; the turns run as ever,
// and a stopped brain offers nothing more.
func TestOfferedSessionsRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	spy := &offerSpy{Store: f.store}
	f.srv.Script(modeltest.Turn{Text: "first"}, modeltest.Turn{Text: "second"})
	cfg := f.config()
	cfg.Store = spy
	cfg.PollInterval = time.Hour // only wake-ups and offers bring work
	b := f.start(cfg)
	id := f.session()

	spy.waitRoom(t)
	f.say(id, "one")
	assertTypes(t, f.waitIdle(id, 1), userMsg, running, start, agentMsg, end, usage, idle)
	spy.waitRoom(t)
	f.say(id, "two")
	assertTypes(t, f.waitIdle(id, 2)[7:], userMsg, running, start, agentMsg, end, usage, idle)
	if n := spy.claimed.Load(); n != 0 {
		t.Errorf("the brain's own claims took %d sessions; want every turn taken from the offer", n)
	}

	// A stopped brain's offer is gone: a session its client wakes is left runnable for the next brain.
	b.Stop()
	other := f.session()
	f.say(other, "three")
	ls, err := f.store.LeaseClaim(context.Background(), &store.LeaseClaimParams{Owner: "next", TTL: time.Minute, SessionID: other})
	if err != nil || len(ls) != 1 {
		t.Fatalf("the next brain's claim of a session sent to a stopped brain: %v, %v", ls, err)
	}
}
