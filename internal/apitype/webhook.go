package apitype

import (
	"crypto/sha256"
	"slices"
	"time"
)

// ID prefixes of webhook endpoints and webhook events.
const (
	PrefixWebhookEndpoint = "whep_"
	PrefixWebhookEvent    = "whe_"
)

// DefaultOrganizationID is the organization a webhook event's data names: a server is one organization.
// DefaultWorkspaceID is the workspace every store has from its first start: the resources of a server set up
// before workspaces existed, and those of a single-key set-up, are in it. It cannot be archived.
const (
	DefaultOrganizationID = "org_corral"
	DefaultWorkspaceID    = PrefixWorkspace + "default"
)

// WebhookEndpoint is a webhook endpoint of the organization: a URL that receives signed events of the types it
// enabled.
type WebhookEndpoint struct {
	Type          ObjectType   `json:"type"` // "webhook_endpoint"
	ID            string       `json:"id"`
	URL           string       `json:"url"`
	Name          string       `json:"name"`
	Description   string       `json:"description"`
	EnabledEvents []string     `json:"enabled_events"`
	State         WebhookState `json:"state"`
	// DisabledReason says why the server disabled the endpoint ("" when enabled, or disabled by a user).
	DisabledReason string    `json:"disabled_reason"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
	// SigningSecret is shown once, when the endpoint is created.
	SigningSecret string `json:"signing_secret,omitempty"`
}

// WebhookState is an endpoint's state.
type WebhookState string

// Webhook endpoint states.
const (
	WebhookEnabled  WebhookState = "enabled"
	WebhookDisabled WebhookState = "disabled"
)

// WebhookEventType is the type of a webhook event (data.type): what happened, e.g. session.status_idled.
type WebhookEventType string

// Subscribed reports whether the endpoint receives events of type t.
func (e *WebhookEndpoint) Subscribed(t WebhookEventType) bool {
	return e.State == WebhookEnabled && slices.Contains(e.EnabledEvents, string(t))
}

// WebhookEvent is a webhook's thin payload: {"type":"event","id":"whe_...","created_at","data":{...}}.
type WebhookEvent struct {
	Type      ObjectType       `json:"type"` // "event"
	ID        string           `json:"id"`
	CreatedAt time.Time        `json:"created_at"`
	Data      WebhookEventData `json:"data"`
}

// WebhookEventData names what happened and to which object.
type WebhookEventData struct {
	Type            WebhookEventType `json:"type"` // a WebhookEventTypes entry
	ID              string           `json:"id"`   // the object's id: a session, a vault, a deployment run...
	OrganizationID  string           `json:"organization_id"`
	WorkspaceID     string           `json:"workspace_id"`
	SessionThreadID string           `json:"session_thread_id,omitempty"` // session.thread_*
	VaultID         string           `json:"vault_id,omitempty"`          // vault_credential.*
}

// NewWebhookEvent builds the event of type typ about the object id at time at. Its id is derived from key
// when key is set (the same key always gives the same id, so that an event recorded twice is one event), else
// random.
func NewWebhookEvent(typ WebhookEventType, id, key string, at time.Time) WebhookEvent {
	eid := NewID(PrefixWebhookEvent)
	if key != "" {
		eid = DerivedID(PrefixWebhookEvent, string(typ)+"\x00"+key)
	}
	return WebhookEvent{Type: ObjectEvent, ID: eid, CreatedAt: at.UTC(),
		Data: WebhookEventData{Type: typ, ID: id, OrganizationID: DefaultOrganizationID, WorkspaceID: DefaultWorkspaceID}}
}

// DerivedID returns prefix + "011C" + 24 base58 characters derived from key: the same key always gives the same
// id, the shape of NewID's.
func DerivedID(prefix, key string) string {
	sum := sha256.Sum256([]byte(key))
	b := make([]byte, 0, len(prefix)+28)
	b = append(b, prefix...)
	b = append(b, "011C"...)
	for _, c := range sum[:24] {
		b = append(b, Base58[int(c)%len(Base58)])
	}
	return string(b)
}

// WebhookEventTypes are the event types an endpoint may enable: those of §2.16 that Corral produces. (The
// official SDK's enum lists only organization-level types; Corral accepts these, a documented extension.)
var WebhookEventTypes = []string{
	"session.created", "session.archived", "session.deleted", "session.updated",
	"session.requires_action", "session.budget_reached",
	"session.status_run_started", "session.status_idled", "session.status_rescheduled", "session.status_terminated",
	"session.thread_created", "session.thread_idled", "session.thread_terminated",
	"session.outcome_evaluation_ended",
	"vault.created", "vault.archived", "vault.deleted",
	"vault_credential.created", "vault_credential.archived", "vault_credential.deleted",
	"vault_credential.refresh_failed",
	"agent.created", "agent.updated", "agent.archived",
	"deployment.created", "deployment.updated", "deployment.paused", "deployment.unpaused", "deployment.archived",
	"deployment_run.started", "deployment_run.succeeded", "deployment_run.failed",
	"environment.created", "environment.updated", "environment.archived", "environment.deleted",
	"memory_store.created", "memory_store.archived", "memory_store.deleted",
}

// KnownWebhookEventType reports whether t is in WebhookEventTypes.
func KnownWebhookEventType(t string) bool { return slices.Contains(WebhookEventTypes, t) }
