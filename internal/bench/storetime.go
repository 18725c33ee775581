package bench

import (
	"context"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// TimedStore wraps a store and records how long its writes and lease claims take, to tell queueing for the
// store from the rest of the platform overhead.
type TimedStore struct {
	store.Store
	mu     sync.Mutex
	ops    map[string][]time.Duration
	claims int
	found  int
}

// NewTimedStore wraps s.
func NewTimedStore(s store.Store) *TimedStore {
	return &TimedStore{Store: s, ops: map[string][]time.Duration{}}
}

func (t *TimedStore) record(op string, start time.Time) {
	d := time.Since(start)
	t.mu.Lock()
	t.ops[op] = append(t.ops[op], d)
	t.mu.Unlock()
}

// StoreTimes summarises the recorded operations and resets them; Claims is how many lease claims were made and
// how many sessions they claimed.
type StoreTimes struct {
	Append, MarkProcessed, Claim, Release Dist
	Claims, ClaimsFound                   int
}

// Take returns the times recorded since the last Take.
func (t *TimedStore) Take() StoreTimes {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := StoreTimes{
		Append: Summarize(t.ops["append"]), MarkProcessed: Summarize(t.ops["mark"]), Claim: Summarize(t.ops["claim"]),
		Release: Summarize(t.ops["release"]), Claims: t.claims, ClaimsFound: t.found,
	}
	t.ops, t.claims, t.found = map[string][]time.Duration{}, 0, 0
	return st
}

func (t *TimedStore) EventAppend(ctx context.Context, p *store.EventAppendParams) ([]apitype.Event, error) {
	defer t.record("append", time.Now())
	return t.Store.EventAppend(ctx, p)
}

func (t *TimedStore) EventMarkProcessed(ctx context.Context, p *store.EventMarkProcessedParams) error {
	defer t.record("mark", time.Now())
	return t.Store.EventMarkProcessed(ctx, p)
}

func (t *TimedStore) LeaseClaim(ctx context.Context, p *store.LeaseClaimParams) ([]*store.Lease, error) {
	defer t.record("claim", time.Now())
	ls, err := t.Store.LeaseClaim(ctx, p)
	t.mu.Lock()
	t.claims++
	t.found += len(ls)
	t.mu.Unlock()
	return ls, err
}

func (t *TimedStore) LeaseRelease(ctx context.Context, l *store.Lease) error {
	defer t.record("release", time.Now())
	return t.Store.LeaseRelease(ctx, l)
}
