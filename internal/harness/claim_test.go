package harness_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
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

// outageStore fails lease claims as an unreachable database would while down is set.
type outageStore struct {
	store.Store
	down atomic.Bool
}

func (o *outageStore) LeaseClaim(ctx context.Context, p *store.LeaseClaimParams) ([]*store.Lease, error) {
	if o.down.Load() {
		return nil, fmt.Errorf("lease claim: %w", store.ErrUnavailable)
	}
	return o.Store.LeaseClaim(ctx, p)
}

// TestClaimOutageLogsOnce: while the store is unreachable a brain keeps polling and logs one error for the
// outage, not one a poll, and one line when claims succeed again; then it works sessions as before.
func TestClaimOutageLogsOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	st := &outageStore{Store: f.store}
	logs := &syncBuffer{}
	cfg := f.config()
	cfg.Store, cfg.PollInterval = st, 10*time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	count := func(msg string) int { return strings.Count(logs.String(), `msg="`+msg+`"`) }
	waitFor := func(msg string, n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); count(msg) < n; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q line %d in the brain's log:\n%s", msg, n, logs.String())
			}
		}
	}
	f.srv.Script(modeltest.Turn{Text: "after the outage"})
	st.down.Store(true)
	f.start(cfg)
	time.Sleep(300 * time.Millisecond) // about 30 polls
	if n := count("lease claims failing; retrying every poll"); n != 1 {
		t.Fatalf("%d lines for one outage of about 30 failed polls; want 1:\n%s", n, logs.String())
	}
	st.down.Store(false)
	waitFor("lease claims succeed again", 1)
	id := f.session()
	f.say(id, "hi")
	f.waitIdle(id, 1)

	st.down.Store(true) // a second outage is a second line
	waitFor("lease claims failing; retrying every poll", 2)
	st.down.Store(false)
	waitFor("lease claims succeed again", 2)
	if n := count("lease claims failing; retrying every poll"); n != 2 {
		t.Fatalf("%d lines for two outages; want 2", n)
	}
}
