package webhook

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/store"
)

// Dispatcher defaults.
const (
	// DefaultRetryPeriod is how long a delivery is retried before it is given up and its endpoint disabled.
	DefaultRetryPeriod = 24 * time.Hour
	// DefaultRetention is how long finished deliveries and told events are kept (for the console) before
	// they are pruned.
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultConcurrency bounds the deliveries in flight, DefaultPerEndpoint those to one endpoint: a slow
	// receiver holds at most that many of the dispatcher's slots.
	DefaultConcurrency = 32
	DefaultPerEndpoint = 4
	// PollInterval is how often the dispatcher fans new events out and looks for due deliveries.
	PollInterval = 200 * time.Millisecond
	// fanOutBatch and claimBatch bound one pass's reads; maxQueued the deliveries held in memory.
	fanOutBatch = 500
	claimBatch  = 1000
	maxQueued   = 5000
	// claimFor is how long a claimed delivery is left to its attempt before another claim may take it: longer
	// than a full queue's wait at the Sender's timeout (queuePerEndpoint / DefaultPerEndpoint attempts of 10 s
	// each). A delivery whose claim lapsed in a queue is not attempted from it: it is claimed again.
	claimFor         = 10 * time.Minute
	queuePerEndpoint = 200
	pruneEvery       = time.Hour
)

// DispatcherConfig configures a Dispatcher.
type DispatcherConfig struct {
	Store  store.WebhookStore
	Sender *Sender
	// Open opens an endpoint's sealed signing secret.
	Open func(ctx context.Context, sealed *store.SealedSecret) (string, error)
	// RetryPeriod (default DefaultRetryPeriod), Retention (default DefaultRetention), Concurrency and
	// PerEndpoint (defaults DefaultConcurrency, DefaultPerEndpoint).
	RetryPeriod time.Duration
	Retention   time.Duration
	Concurrency int
	PerEndpoint int
	Logger      *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Dispatcher delivers the outbox. Each pass fans new events out into deliveries and claims the due ones (the
// store pushes their next attempt out while they are in hand); the claimed deliveries go to their endpoint's
// queue, which up to PerEndpoint workers drain in the background, within Concurrency in all: a slow receiver
// holds its own workers only. A delivery's webhook-id is its event's id on every attempt, so a receiver drops a
// repeat. The dispatcher runs on the fleet's leader (internal/maintain): a pass's context ends when the lease is
// lost, which abandons the attempts in flight unrecorded; their claim lapses and the next leader makes them
// again (at least once).
type Dispatcher struct {
	cfg    DispatcherConfig
	sem    chan struct{}
	mu     sync.Mutex
	queues map[string]*endpointQueue
	queued int
	wg     sync.WaitGroup
	pruned time.Time
}

// endpointQueue is an endpoint's claimed deliveries and how many workers drain it.
type endpointQueue struct {
	pending []claimed
	workers int
}

// claimed is a delivery in hand until its claim lapses.
type claimed struct {
	del   store.WebhookDelivery
	until time.Time
}

// NewDispatcher builds a dispatcher from cfg.
func NewDispatcher(cfg DispatcherConfig) (*Dispatcher, error) {
	if cfg.Store == nil || cfg.Sender == nil || cfg.Open == nil {
		return nil, errors.New("webhook: DispatcherConfig needs Store, Sender and Open")
	}
	cfg.RetryPeriod = cmp.Or(cfg.RetryPeriod, DefaultRetryPeriod)
	cfg.Retention = cmp.Or(cfg.Retention, DefaultRetention)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, DefaultConcurrency)
	cfg.PerEndpoint = cmp.Or(cfg.PerEndpoint, DefaultPerEndpoint)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Dispatcher{cfg: cfg, sem: make(chan struct{}, cfg.Concurrency), queues: map[string]*endpointQueue{}}, nil
}

// Pass fans the new events out and claims the due deliveries, as many as the queues have room for; it returns
// without waiting for their attempts. Once an hour it also prunes what is older than the retention.
func (d *Dispatcher) Pass(ctx context.Context) error {
	for {
		n, err := d.cfg.Store.WebhookFanOut(ctx, fanOutBatch)
		if err != nil {
			return fmt.Errorf("webhooks: fan out: %w", err)
		}
		if n < fanOutBatch {
			break
		}
	}
	now := d.cfg.Now()
	d.mu.Lock()
	room := maxQueued - d.queued
	var full []string // endpoints whose queue is full: their deliveries stay unclaimed for others to take
	for id, q := range d.queues {
		if len(q.pending) >= queuePerEndpoint {
			full = append(full, id)
		}
	}
	d.mu.Unlock()
	if room > 0 {
		until := now.Add(claimFor)
		due, err := d.cfg.Store.WebhookClaimDue(ctx, &store.WebhookClaimParams{Now: now, Until: until,
			Limit: min(room, claimBatch), Skip: full})
		if err != nil {
			return fmt.Errorf("webhooks: claim due deliveries: %w", err)
		}
		for _, del := range due {
			d.enqueue(ctx, claimed{del, until})
		}
	}
	if now.Sub(d.pruned) >= pruneEvery {
		d.pruned = now
		n, err := d.cfg.Store.WebhookPrune(ctx, now.Add(-d.cfg.Retention))
		if err != nil {
			return fmt.Errorf("webhooks: prune: %w", err)
		}
		if n > 0 {
			d.cfg.Logger.Info("webhook deliveries pruned", "rows", n)
		}
	}
	return nil
}

// enqueue queues a claimed delivery on its endpoint, and starts a worker for it if the endpoint has fewer
// than PerEndpoint. A pass claims nothing for an endpoint whose queue holds queuePerEndpoint deliveries
// already, so that a slow endpoint's backlog stays in the store, where another dispatcher may take it.
func (d *Dispatcher) enqueue(ctx context.Context, c claimed) {
	d.mu.Lock()
	defer d.mu.Unlock()
	id := c.del.EndpointID
	q := d.queues[id]
	if q == nil {
		q = &endpointQueue{}
		d.queues[id] = q
	}
	q.pending = append(q.pending, c)
	d.queued++
	if q.workers < d.cfg.PerEndpoint {
		q.workers++
		d.wg.Go(func() { d.drain(ctx, id, q) })
	}
}

// drain attempts an endpoint's queued deliveries one after another, each within the global bound, until the
// queue is empty or ctx ends (what is left is dropped: its claim lapses and it is attempted again).
func (d *Dispatcher) drain(ctx context.Context, endpointID string, q *endpointQueue) {
	for {
		d.mu.Lock()
		if len(q.pending) == 0 || ctx.Err() != nil {
			d.queued -= len(q.pending)
			q.pending = nil
			if q.workers--; q.workers == 0 {
				delete(d.queues, endpointID)
			}
			d.mu.Unlock()
			return
		}
		c := q.pending[0]
		q.pending = q.pending[1:]
		d.queued--
		d.mu.Unlock()
		select {
		case d.sem <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		if d.cfg.Now().Before(c.until) { // a lapsed claim may be another's now
			d.deliver(ctx, &c.del)
		}
		<-d.sem
	}
}

// Wait waits for the deliveries in flight (tests, and a server stopping).
func (d *Dispatcher) Wait() { d.wg.Wait() }

// deliver makes one attempt at a delivery and records it: delivered; failed for good (a refused URL or a
// redirect: the endpoint is disabled); failed after the retry period (disabled too); or pending again after a
// back-off.
func (d *Dispatcher) deliver(ctx context.Context, del *store.WebhookDelivery) {
	log := d.cfg.Logger.With("event", del.Event.ID, "endpoint", del.EndpointID)
	p := &store.WebhookAttemptParams{EventID: del.Event.ID, EndpointID: del.EndpointID, Attempt: del.Attempts + 1}
	secret, err := d.cfg.Open(ctx, &del.Secret)
	var res Result
	if err != nil {
		res = Result{Err: "the signing secret cannot be opened: " + err.Error(), Permanent: true}
	} else {
		body, merr := json.Marshal(&del.Event)
		if merr != nil {
			log.Error("webhook payload", "err", merr)
			return
		}
		// Signed at the real time of sending, whatever the clock the schedule runs on: receivers check it.
		res = d.cfg.Sender.Send(ctx, del.URL, secret, del.Event.ID, time.Now(), body)
	}
	if ctx.Err() != nil {
		return // the lease was lost or the server stops: the attempt is made again, unrecorded
	}
	p.At, p.Status, p.Error = d.cfg.Now(), res.Status, res.Err
	switch {
	case res.Delivered:
		p.State = store.DeliveryDelivered
	case res.Permanent:
		p.State, p.DisableReason = store.DeliveryFailed, res.Err
	case p.At.Sub(del.CreatedAt) >= d.cfg.RetryPeriod:
		p.State = store.DeliveryFailed
		p.DisableReason = fmt.Sprintf("deliveries failed for %s; the last: %s", d.cfg.RetryPeriod, res.Err)
	default:
		p.State, p.NextAttemptAt = store.DeliveryPending, p.At.Add(Backoff(p.Attempt))
	}
	if err := d.cfg.Store.WebhookAttempt(context.WithoutCancel(ctx), p); err != nil && !errors.Is(err, store.ErrConflict) {
		log.Warn("record webhook attempt", "err", err)
	}
	if p.DisableReason != "" {
		log.Warn("webhook endpoint disabled", "reason", p.DisableReason)
	}
}
