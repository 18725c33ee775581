// Package maintain runs a server's periodic jobs. Fleet jobs (the deletion of expired files; next, cron firing
// and webhook retries) run only on the one process that holds a store-backed leader lease
// (store.LeaderStore), fenced like a session lease: the runner renews the lease every TTL/3, and when a renewal
// fails with store.ErrLeaseLost, or the lease's TTL passes without one, the jobs' context is cancelled and the
// runner goes back to trying to acquire it. A runner without a store runs its jobs on every process: for the
// work on a machine's own disk (the workspaces of deleted sessions), which no other process can do for it.
package maintain

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral/internal/store"
)

// Defaults of Config.
const (
	// DefaultLease is the name of the leader lease of a server's fleet jobs.
	DefaultLease = "maintain"
	// DefaultTTL is how long the leader lease lasts without a renewal: the longest a dead leader's jobs wait
	// for another process.
	DefaultTTL = 30 * time.Second
)

// Config configures a Runner.
type Config struct {
	// Store holds the leader lease; nil runs the jobs on this process, without a lease.
	Store store.LeaderStore
	// Lease names the leader lease (default DefaultLease): runners with the same name share one leader.
	Lease string
	// Owner names this process in the lease (default: host name, pid and a random suffix).
	Owner string
	// TTL is the lease's time to live (default DefaultTTL); it is renewed every TTL/3, and a runner that does
	// not hold it tries to acquire it as often.
	TTL    time.Duration
	Logger *slog.Logger // default: discard
}

// job is one registered job.
type job struct {
	name     string
	interval time.Duration
	run      func(ctx context.Context) error
}

// Runner runs registered jobs on their intervals while it leads (or always, without a store). New builds it,
// Add registers jobs, Start runs it, Stop stops it.
type Runner struct {
	cfg  Config
	jobs []job

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	done    chan struct{}
	// abandon, set before Stop, leaves the lease to expire instead of releasing it (tests: a killed leader).
	abandon atomic.Bool
	leading atomic.Bool
}

// New validates cfg and builds a runner with no jobs.
func New(cfg Config) (*Runner, error) {
	cfg.Lease = cmp.Or(cfg.Lease, DefaultLease)
	cfg.TTL = cmp.Or(cfg.TTL, DefaultTTL)
	if cfg.Owner == "" {
		cfg.Owner = defaultOwner()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.TTL < 0 {
		return nil, errors.New("maintain: Config.TTL must not be negative")
	}
	return &Runner{cfg: cfg}, nil
}

// Add registers a job: run is called at once when the runner starts leading, then every interval, until the
// runner stops or loses the lease (its ctx is then cancelled). An error is logged; the job runs again at its
// next interval. Add panics when called after Start, or with a nonpositive interval.
func (r *Runner) Add(name string, interval time.Duration, run func(ctx context.Context) error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		panic("maintain: Add after Start")
	}
	if interval <= 0 {
		panic(fmt.Sprintf("maintain: job %s: interval %s must be positive", name, interval))
	}
	r.jobs = append(r.jobs, job{name: name, interval: interval, run: run})
}

// Jobs is the number of registered jobs.
func (r *Runner) Jobs() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.jobs)
}

// Leading reports whether the runner runs its jobs now (it holds the lease, or needs none).
func (r *Runner) Leading() bool { return r.leading.Load() }

// Start starts the runner in the background; it returns at once.
func (r *Runner) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		return errors.New("maintain: already started")
	}
	r.started = true
	ctx, r.cancel = context.WithCancel(context.WithoutCancel(ctx))
	r.done = make(chan struct{})
	go func() {
		defer close(r.done)
		if r.cfg.Store == nil {
			r.leading.Store(true)
			r.runJobs(ctx)
			r.leading.Store(false)
			return
		}
		r.campaign(ctx)
	}()
	return nil
}

// Stop stops the jobs, waits for them, and releases the lease. Idempotent.
func (r *Runner) Stop() {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// campaign acquires the lease whenever it is free and leads while it holds it, until ctx ends.
func (r *Runner) campaign(ctx context.Context) {
	retry := r.cfg.TTL / 3
	failing := false // one line for an outage of the store, not one a try
	for ctx.Err() == nil {
		l, err := r.cfg.Store.LeaderAcquire(ctx, &store.LeaderAcquireParams{Name: r.cfg.Lease, Owner: r.cfg.Owner, TTL: r.cfg.TTL})
		switch {
		case err == nil:
			failing = false
			r.lead(ctx, l)
		case errors.Is(err, store.ErrConflict) || ctx.Err() != nil:
			failing = false
		case !failing:
			failing = true
			r.cfg.Logger.Warn("leader lease acquisition failing; retrying", "lease", r.cfg.Lease, "every", retry, "err", err)
		}
		sleep(ctx, retry)
	}
}

// lead runs the jobs while the lease l is held: it renews it every TTL/3 and cancels the jobs when a renewal
// says the lease was lost, or when the lease's TTL has passed since the last successful renewal. It returns
// once the jobs have stopped, having released the lease when ctx ended.
func (r *Runner) lead(ctx context.Context, l *store.Leader) {
	// The lease is held until deadline by this process's clock: measured from before the call that took it.
	deadline := time.Now().Add(r.cfg.TTL)
	r.cfg.Logger.Info("leading", "lease", r.cfg.Lease, "owner", r.cfg.Owner)
	jctx, stopJobs := context.WithCancel(ctx)
	var jobs sync.WaitGroup
	jobs.Go(func() { r.runJobs(jctx) })
	r.leading.Store(true)
	defer func() {
		stopJobs()
		jobs.Wait()
		r.leading.Store(false)
	}()
	t := time.NewTicker(r.cfg.TTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			stopJobs()
			jobs.Wait()
			if !r.abandon.Load() {
				rctx, cancel := context.WithTimeout(context.Background(), r.cfg.TTL)
				if err := r.cfg.Store.LeaderRelease(rctx, l); err != nil {
					r.cfg.Logger.Warn("leader lease release failed", "lease", r.cfg.Lease, "err", err)
				}
				cancel()
			}
			return
		case <-t.C:
		}
		start := time.Now()
		rctx, cancel := context.WithDeadline(ctx, deadline)
		renewed, err := r.cfg.Store.LeaderRenew(rctx, l, r.cfg.TTL)
		cancel()
		switch {
		case err == nil:
			l, deadline = renewed, start.Add(r.cfg.TTL)
		case ctx.Err() != nil:
			// Stopping: the next loop releases the lease.
		case errors.Is(err, store.ErrLeaseLost) || !time.Now().Before(deadline):
			r.cfg.Logger.Warn("leader lease lost: the jobs stop", "lease", r.cfg.Lease, "err", err)
			return
		default:
			r.cfg.Logger.Warn("leader lease renewal failed", "lease", r.cfg.Lease, "err", err)
		}
	}
}

// runJobs runs every job on its interval until ctx ends.
func (r *Runner) runJobs(ctx context.Context) {
	r.mu.Lock()
	jobs := r.jobs
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Go(func() {
			t := time.NewTicker(j.interval)
			defer t.Stop()
			for {
				if err := j.run(ctx); err != nil && ctx.Err() == nil {
					r.cfg.Logger.Warn("periodic job failed", "job", j.name, "err", err)
				}
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		})
	}
	wg.Wait()
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func defaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "corral"
	}
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails.
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
