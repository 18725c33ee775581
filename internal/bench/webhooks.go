package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/client"
	"github.com/corralhq/corral/internal/server"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/webhook"
)

// The webhooks section (issue 25) measures the delivery of webhooks through the real server (its fleet jobs:
// the dispatcher on the leader lease, as corral serve runs it) to a receiver over HTTP on 127.0.0.1:
//
//   - latency: from the append of a session.status_idle event to the log (the store's EventAppend, which records
//     the webhook event in the same transaction) to the receiver's reading of the session.status_idled
//     delivery, one event at a time, at random moments (not in step with the dispatcher's passes);
//   - the sustained rate: events appended as fast as the store takes them (batches of 50 idle events), to one
//     endpoint and to ten, timed from the first append to the last delivery received.

// WebhookResult is the webhooks section.
type WebhookResult struct {
	Store string
	// Latency is append → delivery received, one event at a time.
	Latency Dist
	// Rates are the sustained deliveries per second, by number of endpoints.
	Rates []WebhookRate
}

// WebhookRate is one sustained-rate run.
type WebhookRate struct {
	Endpoints, Events, Deliveries int
	Elapsed                       time.Duration
}

// PerSecond is the run's deliveries per second.
func (r WebhookRate) PerSecond() float64 { return float64(r.Deliveries) / r.Elapsed.Seconds() }

// arrivals records the first arrival of each delivery, by webhook-id and endpoint path.
type arrivals struct {
	mu    sync.Mutex
	at    map[string]time.Time
	count int
	more  chan struct{}
}

func (a *arrivals) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Path + " " + r.Header.Get("webhook-id")
	now := time.Now()
	a.mu.Lock()
	if _, ok := a.at[key]; !ok {
		a.at[key] = now
		a.count++
	}
	a.mu.Unlock()
	select {
	case a.more <- struct{}{}:
	default:
	}
	w.WriteHeader(http.StatusNoContent)
}

// wait waits until want deliveries arrived in all, and returns when the last did.
func (a *arrivals) wait(ctx context.Context, want int) (time.Time, error) {
	for {
		a.mu.Lock()
		n := a.count
		var last time.Time
		if n >= want {
			for _, t := range a.at {
				if t.After(last) {
					last = t
				}
			}
		}
		a.mu.Unlock()
		if n >= want {
			return last, nil
		}
		select {
		case <-a.more:
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%d of %d deliveries arrived: %w", n, want, ctx.Err())
		}
	}
}

func (a *arrivals) get(key string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.at[key]
	return t, ok
}

func (b *benchRun) webhooks(ctx context.Context) error {
	if b.cfg.Sealer == nil {
		return errors.New("no vault to seal the endpoints' secrets (Config.Sealer)")
	}
	rcv := &arrivals{at: map[string]time.Time{}, more: make(chan struct{}, 1)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: rcv, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	rcvURL := "http://" + ln.Addr().String()
	st, err := b.openStore(ctx, "webhooks")
	if err != nil {
		return err
	}
	sealer, err := b.cfg.Sealer(ctx, st)
	if err != nil {
		_ = st.Close()
		return err
	}
	s, err := b.serve(ctx, "webhooks", st, serverSpec{fleet: &server.FleetConfig{Sealer: sealer,
		Webhooks: webhook.SenderConfig{AllowInternal: []string{ln.Addr().String()}}}})
	if err != nil {
		return err
	}
	defer s.close()
	res := &WebhookResult{Store: b.rep.Store}
	sessID, err := s.c.CreateSession(ctx, s.agentID, s.envID)
	if err != nil {
		return err
	}
	endpoint := func(i int) error {
		_, err := s.c.WebhookCreate(ctx, &client.WebhookCreateParams{URL: fmt.Sprintf("%s/e%d", rcvURL, i),
			EnabledEvents: []string{"session.status_idled"}})
		return err
	}
	if err := endpoint(0); err != nil {
		return err
	}
	idle := func(n int) ([]apitype.Event, error) {
		evs := make([]apitype.NewEvent, n)
		for i := range evs {
			ev, err := apitype.MakeEvent(apitype.EventSessionStatusIdle, map[string]any{"stop_reason": map[string]string{"type": "end_turn"}})
			if err != nil {
				return nil, err
			}
			evs[i] = ev
		}
		return s.st.EventAppend(ctx, &store.EventAppendParams{SessionID: sessID, Events: evs})
	}
	deliveryKey := func(path string, ev *apitype.Event) string {
		return path + " " + apitype.DerivedID(apitype.PrefixWebhookEvent, "session.status_idled\x00"+ev.ID)
	}

	samples := 100
	if b.cfg.Quick {
		samples = 10
	}
	b.progress("webhooks: latency, %d events one at a time", samples)
	var lat []time.Duration
	for range samples {
		// Events come at random times, not in step with the dispatcher's passes.
		time.Sleep(rand.N(webhook.PollInterval + 50*time.Millisecond))
		t0 := time.Now()
		evs, err := idle(1)
		if err != nil {
			return err
		}
		key := deliveryKey("/e0", &evs[0])
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		for {
			if at, ok := rcv.get(key); ok {
				lat = append(lat, at.Sub(t0))
				break
			}
			select {
			case <-rcv.more:
			case <-time.After(5 * time.Millisecond):
			case <-wctx.Done():
			}
			if wctx.Err() != nil {
				cancel()
				return fmt.Errorf("a delivery did not arrive in 30 s")
			}
		}
		cancel()
	}
	res.Latency = Summarize(lat)

	events := 2000
	if b.cfg.Quick {
		events = 200
	}
	endpoints := 1
	for _, n := range []int{1, 10} {
		for ; endpoints < n; endpoints++ {
			if err := endpoint(endpoints); err != nil {
				return err
			}
		}
		b.progress("webhooks: %d events to %d endpoint(s)", events, n)
		before := rcv.count
		t0 := time.Now()
		for done := 0; done < events; done += 50 {
			if _, err := idle(min(50, events-done)); err != nil {
				return err
			}
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		last, err := rcv.wait(wctx, before+events*n)
		cancel()
		if err != nil {
			return err
		}
		res.Rates = append(res.Rates, WebhookRate{Endpoints: n, Events: events, Deliveries: events * n, Elapsed: last.Sub(t0)})
	}
	b.progress("webhooks: latency p50 %s ms p95 %s ms; %s", Ms(res.Latency.P50), Ms(res.Latency.P95), res.rates())
	b.rep.Webhooks = res
	return nil
}

func (r *WebhookResult) rates() string {
	var parts []string
	for _, x := range r.Rates {
		parts = append(parts, fmt.Sprintf("%.0f deliveries/s to %d endpoint(s)", x.PerSecond(), x.Endpoints))
	}
	return strings.Join(parts, ", ")
}

func webhooksMarkdown(r *WebhookResult) string {
	var b strings.Builder
	b.WriteString("\n### Webhooks\n\n")
	fmt.Fprintf(&b, "Store: %s. The dispatcher (every %s on the leader lease, at most %d deliveries in flight, %d per endpoint) delivers to a receiver over HTTP on 127.0.0.1.\n\n",
		r.Store, webhook.PollInterval, webhook.DefaultConcurrency, webhook.DefaultPerEndpoint)
	fmt.Fprintf(&b, "| measure | figure |\n|---|---|\n")
	fmt.Fprintf(&b, "| log append → delivery received, one event at a time (n=%d) | p50 %s ms, p95 %s ms, max %s ms |\n",
		r.Latency.N, Ms(r.Latency.P50), Ms(r.Latency.P95), Ms(r.Latency.Max))
	for _, x := range r.Rates {
		fmt.Fprintf(&b, "| sustained, %d events to %d endpoint(s) | %d deliveries in %s: %.0f/s |\n", x.Events, x.Endpoints,
			x.Deliveries, x.Elapsed.Round(time.Millisecond), x.PerSecond())
	}
	return b.String()
}

// sealerFor is the Config.Sealer type: the vault of a bench server's store.
type sealerFor = func(ctx context.Context, st store.Store) (api.Sealer, error)
