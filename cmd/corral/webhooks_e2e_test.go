package main

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/corralhq/corral/internal/model/modeltest"
)

// receiver is a webhook endpoint over real TLS on 127.0.0.1 that verifies every delivery with the official SDK's
// Unwrap under the endpoint's signing secret, and records the events it accepted by id.
type receiver struct {
	srv    *httptest.Server
	secret atomic.Pointer[string]
	down   atomic.Bool // answers 503 while set

	mu       sync.Mutex
	events   map[string]*anthropic.UnwrapWebhookEvent // accepted, by webhook event id
	repeats  int                                      // deliveries of an id accepted before
	rejected []string                                 // deliveries Unwrap refused
	changed  chan struct{}
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{events: map[string]*anthropic.UnwrapWebhookEvent{}, changed: make(chan struct{}, 1)}
	r.srv = httptest.NewTLSServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		http.Error(w, "read", http.StatusBadRequest)
		return
	}
	if r.down.Load() {
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
		return
	}
	secret := r.secret.Load()
	if secret == nil {
		http.Error(w, "no secret yet", http.StatusServiceUnavailable)
		return
	}
	c := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithWebhookKey(*secret))
	ev, err := c.Beta.Webhooks.Unwrap(body, req.Header)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.rejected = append(r.rejected, err.Error())
		http.Error(w, "bad signature", http.StatusBadRequest)
		return
	}
	if _, seen := r.events[ev.ID]; seen {
		r.repeats++
	}
	r.events[ev.ID] = ev
	select {
	case r.changed <- struct{}{}:
	default:
	}
	w.WriteHeader(http.StatusNoContent)
}

// hostPort is the receiver's 127.0.0.1:port, for --egress-allow-internal.
func (r *receiver) hostPort() string { return strings.TrimPrefix(r.srv.URL, "https://") }

// caFile writes the receiver's certificate as a CA file for --egress-ca-file.
func (r *receiver) caFile(t *testing.T) string {
	return writePEM(t, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.srv.Certificate().Raw}))
}

// waitFor waits until an accepted event satisfies match, and returns it.
func (r *receiver) waitFor(ctx context.Context, t *testing.T, what string, match func(*anthropic.UnwrapWebhookEvent) bool) *anthropic.UnwrapWebhookEvent {
	t.Helper()
	for {
		r.mu.Lock()
		for _, ev := range r.events {
			if match(ev) {
				r.mu.Unlock()
				return ev
			}
		}
		r.mu.Unlock()
		select {
		case <-r.changed:
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			r.mu.Lock()
			defer r.mu.Unlock()
			var got []string
			for _, ev := range r.events {
				got = append(got, ev.Data.Type+" "+ev.Data.ID)
			}
			t.Fatalf("no %s delivered; got %v, rejected %v", what, got, r.rejected)
		}
	}
}

func isEvent(typ, id string) func(*anthropic.UnwrapWebhookEvent) bool {
	return func(ev *anthropic.UnwrapWebhookEvent) bool { return ev.Data.Type == typ && ev.Data.ID == id }
}

// webhookServer starts `corral serve` trusting the receiver (the operator's --egress-allow-internal and
// --egress-ca-file: the only way a webhook reaches an internal address).
func webhookServer(t *testing.T, data string, model *modeltest.Server, r *receiver, extra ...string) *server {
	return startServer(t, data, model, append([]string{"--egress-allow-internal", r.hostPort(), "--egress-ca-file", r.caFile(t)}, extra...)...)
}

// waitAttemptsRecorded waits until the endpoint has n deliveries, each with a failed attempt recorded and its
// next attempt at least a second away: none is in the server's hand then, nor can one be claimed in that second.
// A server killed with a delivery in hand (claimed, its next attempt pushed out by the claim) leaves it to be
// attempted when the claim lapses, minutes later: by design, and not what TestWebhookSurvivesSIGKILL checks.
func waitAttemptsRecorded(ctx context.Context, t *testing.T, s *server, endpoint string, n int) {
	t.Helper()
	var page struct {
		Data []struct {
			Attempts      int        `json:"attempts"`
			NextAttemptAt *time.Time `json:"next_attempt_at"`
		} `json:"data"`
	}
	for {
		if err := json.Unmarshal([]byte(rawGET(t, s, "/v1/organizations/webhooks/"+endpoint+"/deliveries")), &page); err != nil {
			t.Fatal(err)
		}
		now, ready := time.Now(), len(page.Data) >= n
		for _, d := range page.Data {
			next := d.NextAttemptAt
			ready = ready && d.Attempts > 0 && next != nil && next.After(now.Add(time.Second)) && next.Before(now.Add(time.Minute))
		}
		if ready {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the deliveries' failed attempts were not recorded: %+v", page.Data)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// newEndpoint registers the receiver through the official SDK and gives it the signing secret.
func newEndpoint(ctx context.Context, t *testing.T, c anthropic.Client, r *receiver, events ...string) *anthropic.BetaNewOrganizationWebhookEndpoint {
	t.Helper()
	e, err := c.Beta.Organization.Webhooks.New(ctx, anthropic.BetaOrganizationWebhookNewParams{URL: r.srv.URL + "/hooks",
		EnabledEvents: events, Name: anthropic.String("receiver")})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(e.SigningSecret, "whsec_") || e.State != "enabled" {
		t.Fatalf("created endpoint %s", e.RawJSON())
	}
	r.secret.Store(&e.SigningSecret)
	return e
}

// TestWebhooksThroughSDK: an endpoint registered through the official SDK gets a session's status changes and a
// deployment run's outcome, each verified by the SDK's Unwrap; an endpoint whose URL is internal and not trusted
// is refused at delivery and disabled with the reason; a receiver that is down gets everything when it returns,
// each event once; a secret regenerated signs what follows.
func TestWebhooksThroughSDK(t *testing.T) {
	t.Parallel()
	model := modeltest.NewServer(t)
	r := newReceiver(t)
	s := webhookServer(t, t.TempDir(), model, r)
	c := sdkClient(s)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()

	e := newEndpoint(ctx, t, c, r, "session.status_run_started", "session.status_idled", "deployment_run.succeeded",
		"agent.created")
	got, err := c.Beta.Organization.Webhooks.Get(ctx, e.ID, anthropic.BetaOrganizationWebhookGetParams{})
	if err != nil || got.JSON.ExtraFields["signing_secret"].Valid() || strings.Contains(got.RawJSON(), "whsec_") {
		t.Fatalf("get shows the secret: %v %s", err, got.RawJSON())
	}

	agent, err := c.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "hooked",
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-5"}})
	if err != nil {
		t.Fatal(err)
	}
	env, err := c.Beta.Environments.New(ctx, anthropic.BetaEnvironmentNewParams{Name: "hooks"})
	if err != nil {
		t.Fatal(err)
	}
	r.waitFor(ctx, t, "agent.created", isEvent("agent.created", agent.ID))

	// A deployment run: its session runs one turn.
	model.Script(modeltest.Turn{Text: "Triaged."})
	d, err := c.Beta.Deployments.New(ctx, anthropic.BetaDeploymentNewParams{Name: "triage",
		Agent: anthropic.BetaDeploymentNewParamsAgentUnion{OfString: anthropic.String(agent.ID)}, EnvironmentID: env.ID,
		InitialEvents: []anthropic.BetaManagedAgentsDeploymentInitialEventParamsUnion{{OfUserMessage: &anthropic.BetaManagedAgentsUserMessageEventParams{
			Content: []anthropic.BetaManagedAgentsUserMessageEventParamsContentUnion{{OfText: &anthropic.BetaManagedAgentsTextBlockParam{Text: "triage"}}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	run, err := c.Beta.Deployments.Run(ctx, d.ID, anthropic.BetaDeploymentRunParams{})
	if err != nil || run.SessionID == "" {
		t.Fatalf("run: %v %s", err, run.RawJSON())
	}
	r.waitFor(ctx, t, "deployment_run.succeeded", isEvent("deployment_run.succeeded", run.ID))
	r.waitFor(ctx, t, "session.status_run_started", isEvent("session.status_run_started", run.SessionID))
	idled := r.waitFor(ctx, t, "session.status_idled", isEvent("session.status_idled", run.SessionID))
	if idled.Type != "event" || !strings.HasPrefix(idled.ID, "whe_") || idled.CreatedAt.IsZero() || idled.Data.OrganizationID == "" {
		t.Errorf("payload %s", idled.RawJSON())
	}

	// The receiver goes down; a session runs meanwhile; its events arrive once it is back, each once.
	r.down.Store(true)
	model.Script(modeltest.Turn{Text: "Again."})
	run2, err := c.Beta.Deployments.Run(ctx, d.ID, anthropic.BetaDeploymentRunParams{})
	if err != nil {
		t.Fatal(err)
	}
	waitIdle(t, s.client(), run2.SessionID)
	time.Sleep(6 * time.Second) // the first attempts fail and back off
	r.down.Store(false)
	r.waitFor(ctx, t, "session.status_idled after the outage", isEvent("session.status_idled", run2.SessionID))
	r.waitFor(ctx, t, "deployment_run.succeeded after the outage", isEvent("deployment_run.succeeded", run2.ID))
	// Every event of the outage delivered before the secret changes: one still retrying would be signed with the
	// new secret before the receiver has it.
	r.waitFor(ctx, t, "session.status_run_started after the outage", isEvent("session.status_run_started", run2.SessionID))

	// A regenerated secret signs what follows: the receiver verifies with the new one only.
	sec, err := c.Beta.Organization.Webhooks.RegenerateSigningSecret(ctx, e.ID, anthropic.BetaOrganizationWebhookRegenerateSigningSecretParams{})
	if err != nil || sec.SigningSecret == e.SigningSecret {
		t.Fatalf("regenerate: %v", err)
	}
	r.secret.Store(&sec.SigningSecret)
	agent2, err := c.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "second",
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-5"}})
	if err != nil {
		t.Fatal(err)
	}
	r.waitFor(ctx, t, "agent.created under the new secret", isEvent("agent.created", agent2.ID))

	// An endpoint on an internal address the operator does not trust: refused, disabled with the reason.
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		t.Error("a delivery reached an untrusted internal address")
	}))
	defer other.Close()
	bad, err := c.Beta.Organization.Webhooks.New(ctx, anthropic.BetaOrganizationWebhookNewParams{URL: other.URL,
		EnabledEvents: []string{"agent.created"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Beta.Agents.New(ctx, anthropic.BetaAgentNewParams{Name: "third",
		Model: anthropic.BetaManagedAgentsModelConfigParams{ID: "claude-sonnet-4-5"}}); err != nil {
		t.Fatal(err)
	}
	for {
		got, err := c.Beta.Organization.Webhooks.Get(ctx, bad.ID, anthropic.BetaOrganizationWebhookGetParams{})
		if err != nil {
			t.Fatal(err)
		}
		if got.State == "disabled" {
			if !strings.Contains(got.DisabledReason, "--egress-allow-internal") {
				t.Errorf("disabled_reason %q does not say how to trust the address", got.DisabledReason)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the untrusted endpoint was never disabled: %s", got.RawJSON())
		case <-time.After(200 * time.Millisecond):
		}
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if r.repeats != 0 || len(r.rejected) != 0 {
		t.Errorf("%d repeated deliveries, %d rejected: %v", r.repeats, len(r.rejected), r.rejected)
	}
}

// TestWebhookSurvivesSIGKILL: events committed to the log are delivered although the server is SIGKILLed right
// after the session idled, with its receiver down: the restarted server delivers them.
func TestWebhookSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	model := modeltest.NewServer(t)
	r := newReceiver(t)
	r.down.Store(true)
	data := t.TempDir()
	s := webhookServer(t, data, model, r)
	c := sdkClient(s)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	e := newEndpoint(ctx, t, c, r, "session.status_idled", "session.status_run_started", "session.created")
	model.Script(modeltest.Turn{Text: "Done before the crash."})
	id := newSession(t, s.client(), "work, then the server dies")
	waitIdle(t, s.client(), id)
	waitAttemptsRecorded(ctx, t, s, e.ID, 3)
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-s.exited

	r.down.Store(false)
	webhookServer(t, data, model, r)
	for _, typ := range []string{"session.created", "session.status_run_started", "session.status_idled"} {
		r.waitFor(ctx, t, typ+" after the SIGKILL", isEvent(typ, id))
	}
}
