package maintain

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/postgres"
	"github.com/corralhq/corral/internal/store/postgres/pgtest"
	"github.com/corralhq/corral/internal/store/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const ttl = time.Second

// stores opens one store per adapter: SQLite always, PostgreSQL when CORRAL_TEST_POSTGRES is set.
func stores(t *testing.T) map[string]func(t *testing.T) store.LeaderStore {
	open := func(t *testing.T, s store.Store, err error) store.LeaderStore {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	return map[string]func(t *testing.T) store.LeaderStore{
		"sqlite": func(t *testing.T) store.LeaderStore {
			s, err := sqlite.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "corral.db"))
			return open(t, s, err)
		},
		"postgres": func(t *testing.T) store.LeaderStore {
			s, err := postgres.Open(context.Background(), pgtest.NewDSN(t))
			return open(t, s, err)
		},
	}
}

// counted is a runner whose one job counts its runs and notes when its context was cancelled.
type counted struct {
	*Runner
	runs      atomic.Int64
	cancelled atomic.Int64
}

func newCounted(t *testing.T, s store.LeaderStore, owner string) *counted {
	t.Helper()
	r, err := New(Config{Store: s, Lease: "test", Owner: owner, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	c := &counted{Runner: r}
	r.Add("count", 10*time.Millisecond, func(ctx context.Context) error {
		c.runs.Add(1)
		context.AfterFunc(ctx, func() { c.cancelled.Add(1) })
		return nil
	})
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return c
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
	}
}

// TestOneLeader: of two runners on one store, only one runs the job; stopped without releasing the lease (a
// killed process), the other takes over once the lease's TTL has passed, not before.
func TestOneLeader(t *testing.T) {
	t.Parallel()
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			a, b := newCounted(t, s, "a"), newCounted(t, s, "b")
			waitFor(t, "a leader", 5*time.Second, func() bool { return a.Leading() || b.Leading() })
			leader, other := a, b
			if b.Leading() {
				leader, other = b, a
			}
			waitFor(t, "the leader's job runs", 5*time.Second, func() bool { return leader.runs.Load() >= 5 })
			time.Sleep(2 * ttl) // renewals go on; the other never leads meanwhile
			if n := other.runs.Load(); n != 0 || other.Leading() {
				t.Fatalf("the other runner ran the job %d times (leading %v) while the leader held the lease", n, other.Leading())
			}
			leader.abandon.Store(true)
			killed := time.Now()
			leader.Stop()
			waitFor(t, "the other takes over", 10*ttl, func() bool { return other.runs.Load() > 0 })
			if took := time.Since(killed); took < ttl/4 {
				t.Errorf("the other took over %s after the kill, before the lease's TTL (%s) could pass", took, ttl)
			}
		})
	}
}

// TestRelease: a leader that stops releases the lease, and the other runner takes over at its next try,
// before the TTL passes.
func TestRelease(t *testing.T) {
	t.Parallel()
	s := stores(t)["sqlite"](t)
	long, err := New(Config{Store: s, Lease: "test", Owner: "long", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	long.Add("count", time.Hour, func(context.Context) error { runs.Add(1); return nil })
	if err := long.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the long leader's job", 5*time.Second, func() bool { return runs.Load() > 0 })
	long.Stop()
	long.Stop() // idempotent
	b := newCounted(t, s, "b")
	waitFor(t, "b leads after the release", 5*time.Second, func() bool { return b.runs.Load() > 0 })
}

// faking is a LeaderStore whose renewals, while fake is set, succeed without reaching the store: the process
// believes it still leads while its lease expires (a paused or partitioned process).
type faking struct {
	store.LeaderStore
	fake atomic.Bool
}

func (f *faking) LeaderRenew(ctx context.Context, l *store.Leader, ttl time.Duration) (*store.Leader, error) {
	if f.fake.Load() {
		r := *l
		r.ExpiresAt = time.Now().Add(ttl)
		return &r, nil
	}
	return f.LeaderStore.LeaderRenew(ctx, l, ttl)
}

// TestFencedLeader: a stale leader, whose lease expired and was taken over, is fenced at its next renewal
// (ErrLeaseLost): its jobs' context is cancelled and they stop, while the new leader runs them.
func TestFencedLeader(t *testing.T) {
	t.Parallel()
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			f := &faking{LeaderStore: s}
			a := newCounted(t, f, "a")
			waitFor(t, "a leads", 5*time.Second, func() bool { return a.runs.Load() > 0 })
			f.fake.Store(true) // a's lease now expires in the store, unbeknownst to a
			b := newCounted(t, s, "b")
			waitFor(t, "b takes over the expired lease", 10*ttl, func() bool { return b.runs.Load() > 0 })
			if !a.Leading() || a.cancelled.Load() != 0 {
				t.Fatal("a stopped before its renewals reached the store: the test proves nothing")
			}
			f.fake.Store(false) // a's next renewal reaches the store: fenced
			waitFor(t, "the stale leader stops its jobs", 5*ttl, func() bool { return !a.Leading() && a.cancelled.Load() > 0 })
			n := a.runs.Load()
			time.Sleep(2 * ttl)
			if a.runs.Load() != n || a.Leading() {
				t.Errorf("the fenced leader ran its job again (%d -> %d runs), leading %v", n, a.runs.Load(), a.Leading())
			}
			if !b.Leading() {
				t.Error("the new leader stopped leading")
			}
		})
	}
}

// TestLocal: a runner without a store runs its jobs on this process, each on its interval, until Stop.
func TestLocal(t *testing.T) {
	t.Parallel()
	r, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	var fast, slow atomic.Int64
	r.Add("fast", 5*time.Millisecond, func(context.Context) error { fast.Add(1); return nil })
	r.Add("slow", time.Hour, func(context.Context) error { slow.Add(1); return nil })
	if r.Jobs() != 2 {
		t.Fatalf("Jobs() = %d, want 2", r.Jobs())
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the fast job runs again", 5*time.Second, func() bool { return fast.Load() >= 3 })
	r.Stop()
	if n := slow.Load(); n != 1 {
		t.Errorf("the hourly job ran %d times, want once (at start)", n)
	}
	n := fast.Load()
	time.Sleep(30 * time.Millisecond)
	if fast.Load() != n {
		t.Error("a job ran after Stop")
	}
	if err := r.Start(context.Background()); err == nil {
		t.Error("a second Start succeeded")
	}
}

// unreachable is a LeaderStore whose acquisitions fail as an unreachable database's do while down is set.
type unreachable struct {
	store.LeaderStore
	down atomic.Bool
}

func (u *unreachable) LeaderAcquire(ctx context.Context, p *store.LeaderAcquireParams) (*store.Leader, error) {
	if u.down.Load() {
		return nil, fmt.Errorf("leader acquire: %w", store.ErrUnavailable)
	}
	return u.LeaderStore.LeaderAcquire(ctx, p)
}

// lineCounter is a log sink that counts the records (one Write each) holding text.
type lineCounter struct {
	text string
	n    atomic.Int64
}

func (c *lineCounter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(c.text)) {
		c.n.Add(1)
	}
	return len(p), nil
}

// TestAcquireOutageLogsOnce: while the store is unreachable a runner keeps trying to lead and logs one warning
// for the outage, not one a try; once the store is back it leads.
func TestAcquireOutageLogsOnce(t *testing.T) {
	t.Parallel()
	u := &unreachable{LeaderStore: stores(t)["sqlite"](t)}
	u.down.Store(true)
	failing := &lineCounter{text: "leader lease acquisition failing"}
	r, err := New(Config{Store: u, Lease: "test", Owner: "a", TTL: 60 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(failing, nil))})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	r.Add("count", time.Hour, func(context.Context) error { runs.Add(1); return nil })
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	time.Sleep(400 * time.Millisecond) // a try every 20 ms
	if n := failing.n.Load(); n != 1 {
		t.Fatalf("%d lines for one outage of about 20 failed tries; want 1", n)
	}
	u.down.Store(false)
	waitFor(t, "the runner leads once the store is back", 5*time.Second, func() bool { return runs.Load() > 0 })
}
