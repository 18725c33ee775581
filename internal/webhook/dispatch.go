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
	// fanOutBatch and dueBatch bound one pass's reads.
	fanOutBatch = 500
	dueBatch    = 200
	pruneEvery  = time.Hour
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

// Dispatcher delivers the outbox: each pass fans new events out into deliveries and starts the due ones, in
// the background, within its concurrency bounds. A delivery is attempted at least once per due time; its
// webhook-id is its event's id on every attempt, so a receiver drops a repeat. It runs on the fleet's leader
// (internal/maintain): a pass's context ends when the lease is lost, which abandons the attempts in flight
// unrecorded (the next leader makes them again: at least once).
type Dispatcher struct {
	cfg      DispatcherConfig
	sem      chan struct{}
	mu       sync.Mutex
	inflight map[deliveryKey]bool
	endpoint map[string]int
	wg       sync.WaitGroup
	pruned   time.Time
}

type deliveryKey struct{ event, endpoint string }

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
	return &Dispatcher{cfg: cfg, sem: make(chan struct{}, cfg.Concurrency), inflight: map[deliveryKey]bool{},
		endpoint: map[string]int{}}, nil
}

// Pass fans the new events out and starts the due deliveries that are not in flight; it returns without
// waiting for them. Once an hour it also prunes what is older than the retention.
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
	due, err := d.cfg.Store.WebhookDeliveriesDue(ctx, now, dueBatch)
	if err != nil {
		return fmt.Errorf("webhooks: due deliveries: %w", err)
	}
	for i := range due {
		del := due[i]
		k := deliveryKey{del.Event.ID, del.EndpointID}
		d.mu.Lock()
		busy := d.inflight[k] || d.endpoint[del.EndpointID] >= d.cfg.PerEndpoint
		if !busy {
			d.inflight[k] = true
			d.endpoint[del.EndpointID]++
		}
		d.mu.Unlock()
		if busy {
			continue
		}
		select {
		case d.sem <- struct{}{}:
		case <-ctx.Done():
			d.release(k)
			return ctx.Err()
		default:
			d.release(k) // every slot is busy: the next pass takes it
			continue
		}
		d.wg.Go(func() {
			defer func() { <-d.sem; d.release(k) }()
			d.deliver(ctx, &del)
		})
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

// Wait waits for the deliveries in flight (tests, and a server stopping).
func (d *Dispatcher) Wait() { d.wg.Wait() }

func (d *Dispatcher) release(k deliveryKey) {
	d.mu.Lock()
	delete(d.inflight, k)
	if d.endpoint[k.endpoint]--; d.endpoint[k.endpoint] <= 0 {
		delete(d.endpoint, k.endpoint)
	}
	d.mu.Unlock()
}

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
		res = d.cfg.Sender.Send(ctx, del.URL, secret, del.Event.ID, d.cfg.Now(), body)
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
