package harness_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/model/modeltest"
	"github.com/corralhq/corral/internal/store"
)

// countingStore counts lease claims.
type countingStore struct {
	store.Store
	claims atomic.Int64
}

func (c *countingStore) LeaseClaim(ctx context.Context, p *store.LeaseClaimParams) ([]*store.Lease, error) {
	c.claims.Add(1)
	return c.Store.LeaseClaim(ctx, p)
}

// TestIdleWorkersDoNotHerd: many idle workers do not all go to the store on each wake-up or poll; one claim
// serves them all. Sessions are still all worked, concurrently.
func TestIdleWorkersDoNotHerd(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cs := &countingStore{Store: f.store}
	cfg := f.config()
	cfg.Store, cfg.Workers, cfg.PollInterval = cs, 200, 50*time.Millisecond
	hold := make(chan struct{})
	f.srv.Script(modeltest.Turn{Text: "one", Hold: hold}, modeltest.Turn{Text: "two", Hold: hold}, modeltest.Turn{Text: "three", Hold: hold})
	f.start(cfg)
	time.Sleep(300 * time.Millisecond) // about 6 polls
	if n := cs.claims.Load(); n > 20 {
		t.Errorf("%d lease claims by 200 idle workers in 6 poll intervals: every worker polls", n)
	}
	ids := []string{f.session(), f.session(), f.session()}
	before := cs.claims.Load()
	for _, id := range ids {
		f.say(id, "hi")
	}
	f.waitRequests(3) // the three sessions are worked at once: each holds a worker in its model call
	if n := cs.claims.Load() - before; n > 12 {
		t.Errorf("%d lease claims for 3 wake-ups with 200 idle workers: a thundering herd", n)
	}
	close(hold)
	for _, id := range ids {
		f.waitIdle(id, 1)
	}
}
