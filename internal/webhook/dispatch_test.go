package webhook_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/webhook"
)

// fakeClock is the dispatcher's clock, moved by hand: back-offs and the retry period pass at once.
type fakeClock struct{ t atomic.Pointer[time.Time] }

func (c *fakeClock) now() time.Time          { return *c.t.Load() }
func (c *fakeClock) set(t time.Time)         { c.t.Store(&t) }
func (c *fakeClock) advance(d time.Duration) { c.set(c.now().Add(d)) }

// hook is a receiver that verifies deliveries with the official SDK and can be switched down.
type hook struct {
	srv    *httptest.Server
	secret string
	down   atomic.Bool
	mu     sync.Mutex
	got    map[string]int // accepted deliveries by webhook event id
}

func newHook(t *testing.T, secret string) *hook {
	h := &hook{secret: secret, got: map[string]int{}}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := make([]byte, 0, 512)
		buf := make([]byte, 512)
		for {
			n, err := r.Body.Read(buf)
			body = append(body, buf[:n]...)
			if err != nil {
				break
			}
		}
		if h.down.Load() {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		c := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithWebhookKey(h.secret))
		ev, err := c.Beta.Webhooks.Unwrap(body, r.Header)
		if err != nil {
			t.Errorf("unwrap: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		h.got[ev.ID]++
		h.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hook) count() (ids, deliveries int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range h.got {
		ids, deliveries = ids+1, deliveries+n
	}
	return ids, deliveries
}

type dispatchEnv struct {
	st    store.Store
	clock *fakeClock
	d     *webhook.Dispatcher
}

// newDispatchEnv builds a dispatcher over a real SQLite store whose "sealed" secrets are the secrets themselves
// (the vault is not what is under test: Open is the dispatcher's port to it).
func newDispatchEnv(t *testing.T, allow ...string) *dispatchEnv {
	return newDispatchEnvRetry(t, time.Hour, allow...)
}

func newDispatchEnvRetry(t *testing.T, retry time.Duration, allow ...string) *dispatchEnv {
	t.Helper()
	st, err := sqlite.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	c := &fakeClock{}
	c.set(time.Now().UTC())
	d, err := webhook.NewDispatcher(webhook.DispatcherConfig{Store: st,
		Sender: webhook.NewSender(webhook.SenderConfig{AllowInternal: allow, Timeout: 2 * time.Second}),
		Open: func(_ context.Context, s *store.SealedSecret) (string, error) {
			return string(s.Ciphertext), nil
		}, RetryPeriod: retry, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	return &dispatchEnv{st: st, clock: c, d: d}
}

func (e *dispatchEnv) endpoint(t *testing.T, url, secret string, events ...string) string {
	t.Helper()
	id := apitype.NewID(apitype.PrefixWebhookEndpoint)
	at := e.clock.now().Add(-time.Second)
	rec := &store.WebhookEndpointRecord{Endpoint: apitype.WebhookEndpoint{Type: apitype.ObjectWebhookEndpoint, ID: id,
		URL: url, EnabledEvents: events, State: apitype.WebhookEnabled, CreatedAt: at, UpdatedAt: at},
		Secret: store.SealedSecret{CredentialID: id, Name: "signing_secret", Ciphertext: []byte(secret)}}
	if err := e.st.WebhookEndpointCreate(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	return id
}

func (e *dispatchEnv) events(t *testing.T, typ string, n int) {
	t.Helper()
	evs := make([]apitype.WebhookEvent, n)
	for i := range evs {
		evs[i] = apitype.NewWebhookEvent(apitype.WebhookEventType(typ), apitype.NewID(apitype.PrefixAgent), "", e.clock.now())
	}
	if err := e.st.WebhookEventAppend(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
}

// pass runs one pass and waits for its deliveries.
func (e *dispatchEnv) pass(t *testing.T) {
	t.Helper()
	if err := e.d.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.d.Wait()
}

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// TestDispatcherDeliversOnce: events go to the endpoints subscribed to their type, each once per endpoint,
// verified by the SDK; an endpoint that does not want a type gets none of it.
func TestDispatcherDeliversOnce(t *testing.T) {
	t.Parallel()
	h := newHook(t, testSecret)
	other := newHook(t, testSecret)
	e := newDispatchEnv(t, strings.TrimPrefix(h.srv.URL, "http://"), strings.TrimPrefix(other.srv.URL, "http://"))
	e.endpoint(t, h.srv.URL, testSecret, "agent.created")
	e.endpoint(t, other.srv.URL, testSecret, "vault.created")
	e.events(t, "agent.created", 120)
	for range 3 {
		e.pass(t)
	}
	if ids, n := h.count(); ids != 120 || n != 120 {
		t.Errorf("subscribed endpoint: %d ids in %d deliveries, want 120 once each", ids, n)
	}
	if ids, _ := other.count(); ids != 0 {
		t.Errorf("an endpoint got %d events of a type it did not enable", ids)
	}
}

// TestDispatcherRetriesThenDisables: a receiver that fails is retried with back-off and gets the event once it
// is back; one that keeps failing for the retry period is given up and its endpoint disabled with the reason.
func TestDispatcherRetriesThenDisables(t *testing.T) {
	t.Parallel()
	h := newHook(t, testSecret)
	e := newDispatchEnv(t, strings.TrimPrefix(h.srv.URL, "http://"))
	id := e.endpoint(t, h.srv.URL, testSecret, "agent.created")
	h.down.Store(true)
	e.events(t, "agent.created", 1)
	e.pass(t)
	e.pass(t) // not due yet: backing off
	ds, err := e.st.WebhookDeliveryList(context.Background(), &store.WebhookDeliveryListParams{EndpointID: id, Limit: 10})
	if err != nil || len(ds) != 1 || ds[0].Attempts != 1 || ds[0].State != store.DeliveryPending || ds[0].LastStatus != http.StatusBadGateway ||
		!ds[0].NextAttemptAt.After(e.clock.now()) {
		t.Fatalf("after one failed attempt: %v %+v", err, ds)
	}
	h.down.Store(false)
	e.clock.advance(time.Minute)
	e.pass(t)
	if ids, n := h.count(); ids != 1 || n != 1 {
		t.Fatalf("after the receiver came back: %d ids, %d deliveries", ids, n)
	}

	// Down for longer than the retry period: failed, and the endpoint disabled.
	h.down.Store(true)
	e.events(t, "agent.created", 1)
	for range 20 {
		e.pass(t)
		e.clock.advance(10 * time.Minute)
	}
	ep, err := e.st.WebhookEndpointGet(context.Background(), id)
	if err != nil || ep.Endpoint.State != apitype.WebhookDisabled || !strings.Contains(ep.Endpoint.DisabledReason, "HTTP 502") {
		t.Fatalf("endpoint after an hour of failures: %v %+v", err, ep.Endpoint)
	}
	ds, _ = e.st.WebhookDeliveryList(context.Background(), &store.WebhookDeliveryListParams{EndpointID: id, Limit: 10})
	if len(ds) != 2 || ds[0].State != store.DeliveryFailed || ds[0].Attempts < 3 {
		t.Errorf("the given-up delivery: %+v", ds[0])
	}
}

// TestDispatcherRefusesInternal: an endpoint on an internal address the operator did not allow is refused at
// once, never reached, and disabled with a reason that says how to allow it.
func TestDispatcherRefusesInternal(t *testing.T) {
	t.Parallel()
	h := newHook(t, testSecret)
	e := newDispatchEnv(t) // no --egress-allow-internal
	id := e.endpoint(t, h.srv.URL, testSecret, "agent.created")
	e.events(t, "agent.created", 3)
	e.pass(t)
	if ids, _ := h.count(); ids != 0 {
		t.Fatalf("%d deliveries reached an untrusted internal address", ids)
	}
	ep, err := e.st.WebhookEndpointGet(context.Background(), id)
	if err != nil || ep.Endpoint.State != apitype.WebhookDisabled || !strings.Contains(ep.Endpoint.DisabledReason, "--egress-allow-internal") {
		t.Fatalf("endpoint: %v %+v", err, ep.Endpoint)
	}
}

// TestDispatcherSlowEndpoint: a receiver that hangs holds its own workers only: another endpoint's deliveries
// all arrive meanwhile.
func TestDispatcherSlowEndpoint(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(release)
	h := newHook(t, testSecret)
	e := newDispatchEnv(t, strings.TrimPrefix(h.srv.URL, "http://"), strings.TrimPrefix(slow.URL, "http://"))
	e.endpoint(t, slow.URL, testSecret, "agent.created")
	e.endpoint(t, h.srv.URL, testSecret, "agent.created")
	e.events(t, "agent.created", 50)
	if err := e.d.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if ids, _ := h.count(); ids == 50 {
			break
		}
		if time.Now().After(deadline) {
			ids, _ := h.count()
			t.Fatalf("the fast endpoint got %d of 50 while the slow one hung", ids)
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.d.Wait()
}

// TestDispatcherHourOutage: a receiver down for an hour (the default retry period is a day) gets every event
// once it is back, each once, within the capped back-off; the attempts made meanwhile are recorded.
func TestDispatcherHourOutage(t *testing.T) {
	t.Parallel()
	h := newHook(t, testSecret)
	e := newDispatchEnvRetry(t, webhook.DefaultRetryPeriod, strings.TrimPrefix(h.srv.URL, "http://"))
	id := e.endpoint(t, h.srv.URL, testSecret, "agent.created")
	h.down.Store(true)
	e.events(t, "agent.created", 25)
	for range 60 { // an hour, a pass a minute
		e.pass(t)
		e.clock.advance(time.Minute)
	}
	if ids, _ := h.count(); ids != 0 {
		t.Fatalf("%d delivered while down", ids)
	}
	h.down.Store(false)
	for range 61 { // the back-off is capped at an hour
		e.pass(t)
		e.clock.advance(time.Minute)
	}
	if ids, n := h.count(); ids != 25 || n != 25 {
		t.Fatalf("after the outage: %d ids in %d deliveries, want 25 once each", ids, n)
	}
	ds, err := e.st.WebhookDeliveryList(context.Background(), &store.WebhookDeliveryListParams{EndpointID: id, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.State != store.DeliveryDelivered || d.Attempts < 5 {
			t.Errorf("delivery %s: %s after %d attempts, want delivered after the retries of the outage", d.Event.ID, d.State, d.Attempts)
		}
	}
	ep, _ := e.st.WebhookEndpointGet(context.Background(), id)
	if ep.Endpoint.State != apitype.WebhookEnabled {
		t.Errorf("an hour's outage disabled the endpoint: %s", ep.Endpoint.DisabledReason)
	}
}
