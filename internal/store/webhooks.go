package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/corralhq/corral/internal/apitype"
)

// WebhookStore keeps webhook endpoints and the durable outbox of webhook events and their deliveries.
//
// Events reach the outbox in the transaction of what they tell: those of a session's log (status changes,
// threads, outcome evaluations, budget) are recorded by EventAppend and SessionCreate themselves
// (LogWebhookEvents), so that an event committed to the log is delivered even if its writer dies at once.
// Events of other resources are appended with WebhookEventAppend right after their write. An event is recorded
// whether or not an endpoint wants it; WebhookFanOut later turns each event into one delivery per endpoint
// subscribed to its type when it fans out, exactly once per (event, endpoint).
type WebhookStore interface {
	// WebhookEndpointCreate stores a new endpoint; ErrConflict if the id exists.
	WebhookEndpointCreate(ctx context.Context, e *WebhookEndpointRecord) error
	// WebhookEndpointGet returns an endpoint; ErrNotFound if there is none.
	WebhookEndpointGet(ctx context.Context, id string) (*WebhookEndpointRecord, error)
	// WebhookEndpointUpdate reads the endpoint, applies fn and writes the result, atomically (the Update rule;
	// KeepWebhookEndpoint).
	WebhookEndpointUpdate(ctx context.Context, id string, fn func(*WebhookEndpointRecord) error) (*WebhookEndpointRecord, error)
	// WebhookEndpointList lists endpoints by (created_at, id).
	WebhookEndpointList(ctx context.Context, p *ListParams) ([]WebhookEndpointRecord, error)
	// WebhookEndpointDelete deletes an endpoint and its deliveries; ErrNotFound if there is none.
	WebhookEndpointDelete(ctx context.Context, id string) error

	// WebhookEventAppend records events in the outbox; an event whose id is recorded already is skipped.
	WebhookEventAppend(ctx context.Context, events []apitype.WebhookEvent) error
	// WebhookFanOut takes up to limit events that have not fanned out, oldest first, creates a pending delivery
	// for each endpoint subscribed to its type (apitype.WebhookEndpoint.Subscribed) and created before the event,
	// and marks them fanned out, in one transaction. A delivery's created_at and first next_attempt_at are its
	// event's created_at (due at once, whatever the store's clock). It returns how many events it took.
	WebhookFanOut(ctx context.Context, limit int) (int, error)
	// WebhookClaimDue claims up to p.Limit pending deliveries due at p.Now (next_attempt_at <= p.Now) to enabled
	// endpoints, soonest first: in the same transaction their next_attempt_at becomes p.Until, so that the next
	// claim (by this dispatcher or another) skips them while they are attempted, and takes them again after
	// p.Until if their attempt was never recorded (its process died). They are returned as they were before.
	WebhookClaimDue(ctx context.Context, p *WebhookClaimParams) ([]WebhookDelivery, error)
	// WebhookAttempt records an attempt at a delivery: fenced by p.Attempt (the delivery must have made
	// p.Attempt-1 attempts and be pending, else ErrConflict: another process recorded it). A delivered or
	// given-up delivery is final; with p.DisableReason set, the endpoint is disabled with it in the same
	// transaction.
	WebhookAttempt(ctx context.Context, p *WebhookAttemptParams) error
	// WebhookDeliveryList lists an endpoint's deliveries, newest first, with their events.
	WebhookDeliveryList(ctx context.Context, p *WebhookDeliveryListParams) ([]WebhookDelivery, error)
	// WebhookPrune deletes the final deliveries last attempted before before, and the events fanned out
	// before before that have no delivery left. It returns how many rows went.
	WebhookPrune(ctx context.Context, before time.Time) (int, error)
}

// WebhookEndpointRecord is an endpoint as stored: what the API shows (without the secret), and its sealed
// signing secret (SealedSecret.CredentialID is the endpoint's id, Name "signing_secret").
type WebhookEndpointRecord struct {
	Endpoint apitype.WebhookEndpoint `json:"endpoint"`
	Secret   SealedSecret            `json:"secret"`
}

// KeepWebhookEndpoint is what WebhookEndpointUpdate keeps of the endpoint read: its id and creation.
func KeepWebhookEndpoint(next, cur *WebhookEndpointRecord) {
	next.Endpoint.ID, next.Endpoint.CreatedAt, next.Endpoint.Type = cur.Endpoint.ID, cur.Endpoint.CreatedAt, cur.Endpoint.Type
	next.Endpoint.SigningSecret = ""
}

// Delivery states.
const (
	DeliveryPending   = "pending"
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed" // given up: retried for the whole retry period, or refused for good
)

// WebhookDelivery is one event for one endpoint, and how its delivery went.
type WebhookDelivery struct {
	Event      apitype.WebhookEvent
	EndpointID string
	// URL and Secret are the endpoint's (WebhookClaimDue fills them).
	URL           string
	Secret        SealedSecret
	State         string
	Attempts      int
	NextAttemptAt time.Time
	// LastStatus, LastError and LastAttemptAt describe the last attempt (0, "" and nil before the first).
	LastStatus    int
	LastError     string
	LastAttemptAt *time.Time
	CreatedAt     time.Time
}

// WebhookClaimParams claims due deliveries.
type WebhookClaimParams struct {
	Now, Until time.Time
	Limit      int
	// Skip are endpoints whose deliveries are not claimed (the dispatcher's queue for them is full).
	Skip []string
}

// WebhookAttemptParams records one attempt at a delivery.
type WebhookAttemptParams struct {
	EventID    string
	EndpointID string
	Attempt    int // this attempt's number, from 1
	At         time.Time
	Status     int
	Error      string
	// State is the delivery's state after the attempt: delivered, failed, or pending with NextAttemptAt.
	State         string
	NextAttemptAt time.Time
	// DisableReason, if set, disables the endpoint with it.
	DisableReason string
}

// WebhookDeliveryListParams pages an endpoint's deliveries, newest first.
type WebhookDeliveryListParams struct {
	EndpointID string
	Limit      int
	// Before continues after this delivery's (created_at, event id), going back.
	Before *Cursor
}

// LogWebhookEvents returns the webhook events that events of a session's log tell (none for most types):
// status changes, threads, outcome evaluations, budget. Each event's id is derived from the log event's, so a
// log event is told once. Adapters record them in the transaction that appends the log events.
func LogWebhookEvents(sessionID string, events []apitype.Event) []apitype.WebhookEvent {
	var out []apitype.WebhookEvent
	add := func(typ apitype.WebhookEventType, e *apitype.Event, thread string) {
		w := apitype.NewWebhookEvent(typ, sessionID, e.ID, e.CreatedAt)
		w.Data.SessionThreadID = thread
		out = append(out, w)
	}
	for i := range events {
		e := &events[i]
		if e.Thread != "" && !e.CrossPost {
			continue // a child thread's own stream: its cross-posted copy (or the primary's event) tells it
		}
		switch e.Type {
		case apitype.EventSessionStatusRunning:
			add("session.status_run_started", e, "")
		case apitype.EventSessionStatusIdle:
			add("session.status_idled", e, "")
			var d struct {
				StopReason apitype.StopReason `json:"stop_reason"`
			}
			if json.Unmarshal(e.Data, &d) == nil {
				switch d.StopReason.Type {
				case apitype.StopRequiresAction:
					add("session.requires_action", e, "")
				case apitype.StopBudgetReached:
					add("session.budget_reached", e, "")
				}
			}
		case apitype.EventSessionStatusRescheduled:
			add("session.status_rescheduled", e, "")
		case apitype.EventSessionStatusTerminated:
			add("session.status_terminated", e, "")
		case apitype.EventSessionUpdated:
			add("session.updated", e, "")
		case apitype.EventSpanOutcomeEvaluationEnd:
			add("session.outcome_evaluation_ended", e, "")
		case apitype.EventSessionThreadCreated, apitype.EventSessionThreadStatusIdle,
			apitype.EventSessionThreadStatusTerminated:
			var d struct {
				Thread string `json:"session_thread_id"`
			}
			_ = json.Unmarshal(e.Data, &d)
			typ := map[apitype.EventType]apitype.WebhookEventType{
				apitype.EventSessionThreadCreated:          "session.thread_created",
				apitype.EventSessionThreadStatusIdle:       "session.thread_idled",
				apitype.EventSessionThreadStatusTerminated: "session.thread_terminated",
			}[e.Type]
			add(typ, e, d.Thread)
		}
	}
	return out
}

// SessionCreatedWebhookEvent is the session.created event of a new session, which adapters record in the
// transaction that creates it.
func SessionCreatedWebhookEvent(s *apitype.Session) apitype.WebhookEvent {
	return apitype.NewWebhookEvent("session.created", s.ID, s.ID, s.CreatedAt)
}
