package store

import (
	"context"
	"time"

	"github.com/corralhq/corral/internal/apitype"
)

// SessionStore keeps sessions. A session's status, usage and scheduling state are owned by the store and the
// brain; the rest of the document by the API.
type SessionStore interface {
	// SessionCreate stores a new session and appends its initial events in the same transaction, marking it
	// runnable when there are any.
	SessionCreate(ctx context.Context, p *SessionCreateParams) (*apitype.Session, []apitype.Event, error)
	SessionGet(ctx context.Context, id string) (*apitype.Session, error)
	// SessionState reads what a request checks of a session before it acts on it, from the store's own
	// columns: none of the session's document, which SessionGet decodes (the hot path of every append). No
	// session is ErrNotFound.
	SessionState(ctx context.Context, id string) (*SessionState, error)
	// SessionUpdate reads the session, applies fn and writes the result, atomically. fn must not change
	// status or usage; those belong to EventAppend.
	SessionUpdate(ctx context.Context, id string, fn func(*apitype.Session) error) (*apitype.Session, error)
	SessionList(ctx context.Context, p *SessionListParams) ([]apitype.Session, error)
	// SessionDelete removes the session and its log. Subscribers are woken; their next read finds ErrNotFound.
	SessionDelete(ctx context.Context, id string) error
}

// SessionState is a session's status and archive time: what the API checks before it appends to the session's
// log or opens its stream.
type SessionState struct {
	ID         string
	Status     string
	ArchivedAt *time.Time
}

// SessionCreateParams creates a session.
type SessionCreateParams struct {
	Session       *apitype.Session
	InitialEvents []apitype.NewEvent
	// ResourceSecrets are stored with the session, in the same transaction (as ResourceSecretPut would): a
	// repository's sealed authorization_token is there before anyone can act on the session.
	ResourceSecrets []SealedSecret
	// Threads are the session's threads from the start (a multi-agent session's primary), created in the same
	// transaction.
	Threads []apitype.SessionThread
}

// SessionListParams filters and pages sessions.
type SessionListParams struct {
	ListParams
	AgentID      string
	AgentVersion int
	// DeploymentID keeps the sessions a deployment's runs created (their deployment_id).
	DeploymentID string
	Statuses     []string
}

// KeepSession is what SessionUpdate keeps of the session read: what the store and the brain own (id, status,
// usage, active time). The rest of the document, duration included, is the API's.
func KeepSession(next, cur *apitype.Session) {
	next.ID, next.Status, next.Usage, next.Stats.ActiveSeconds = cur.ID, cur.Status, cur.Usage, cur.Stats.ActiveSeconds
}
