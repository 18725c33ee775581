package apitype

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"
)

// Identifiers and secrets of the self-hosted work queue.
const (
	PrefixWork           = "work_"
	PrefixEnvironmentKey = "envkey_"

	// EnvironmentKeyPrefix starts every environment key secret; SessionsTokenPrefix every per-item sessions
	// token. Neither can be mistaken for an API key (APIKeySecretPrefix and base58 only).
	EnvironmentKeyPrefix = "corral-env-"
	SessionsTokenPrefix  = "corral-wst-"
)

// WorkState is the state of a work item: queued (waiting for a worker; polled items stay queued until acked),
// starting (acked), active (heartbeating), stopping (stop requested) and stopped (final).
type WorkState string

// Work states.
const (
	WorkQueued   WorkState = "queued"
	WorkStarting WorkState = "starting"
	WorkActive   WorkState = "active"
	WorkStopping WorkState = "stopping"
	WorkStopped  WorkState = "stopped"
)

// NoHeartbeat is the expected_last_heartbeat of a worker's first heartbeat.
const NoHeartbeat = "NO_HEARTBEAT"

// Work is a work item of a self-hosted environment's queue: a session that needs its hands. The fields after
// StoppedAt are the store's and never go on the wire.
type Work struct {
	Type              ObjectType        `json:"type"` // "work"
	ID                string            `json:"id"`
	EnvironmentID     string            `json:"environment_id"`
	State             WorkState         `json:"state"`
	Data              WorkData          `json:"data"`
	Metadata          map[string]string `json:"metadata"`
	Secret            *string           `json:"secret"` // only in the answer of the poll that delivers the item
	CreatedAt         time.Time         `json:"created_at"`
	AcknowledgedAt    *time.Time        `json:"acknowledged_at"`
	StartedAt         *time.Time        `json:"started_at"`
	LatestHeartbeatAt *time.Time        `json:"latest_heartbeat_at"`
	StopRequestedAt   *time.Time        `json:"stop_requested_at"`
	StoppedAt         *time.Time        `json:"stopped_at"`

	// WorkerID is the Anthropic-Worker-ID of the poll that last delivered the item.
	WorkerID string `json:"-"`
	// PolledAt is when a poll last delivered the item (nil: never, or re-queued since).
	PolledAt *time.Time `json:"-"`
	// LeaseExpiresAt is when the holder's lease ends without a heartbeat (starting, active, stopping).
	LeaseExpiresAt *time.Time `json:"-"`
	// TTLSeconds is the lease granted by the last heartbeat (or the ack).
	TTLSeconds int `json:"-"`
	// TokenHash is the HashAPIKey of the sessions token minted by the delivering poll.
	TokenHash string `json:"-"`
	// Held: the item went back to the queue because its holder lost the lease, and waits for the session's
	// brain to settle the tool calls that holder may have run before any worker gets it again.
	Held bool `json:"-"`
	// LostSeq is the session's last sequence number when a worker that had acked the item lost or stopped it:
	// a tool call up to it may have run on that worker (0: never).
	LostSeq int64 `json:"-"`
}

// WorkData says what a work item is for: the kind of object (a session) and its id.
type WorkData struct {
	Type ObjectType `json:"type"` // "session"
	ID   string     `json:"id"`
}

// LastHeartbeat is the item's last_heartbeat as the heartbeat endpoint reports it and expects it back: the
// time of the latest heartbeat, "" before the first.
func (w *Work) LastHeartbeat() string {
	if w.LatestHeartbeatAt == nil {
		return ""
	}
	return w.LatestHeartbeatAt.UTC().Format(time.RFC3339Nano)
}

// WorkHeartbeat is the answer of a heartbeat.
type WorkHeartbeat struct {
	Type          ObjectType `json:"type"` // "work_heartbeat"
	LastHeartbeat string     `json:"last_heartbeat"`
	LeaseExtended bool       `json:"lease_extended"`
	State         WorkState  `json:"state"`
	TTLSeconds    int        `json:"ttl_seconds"`
}

// WorkQueueStats describes an environment's queue.
type WorkQueueStats struct {
	Type           ObjectType `json:"type"` // "work_queue_stats"
	Depth          int        `json:"depth"`
	Pending        int        `json:"pending"`
	OldestQueuedAt *time.Time `json:"oldest_queued_at"`
	WorkersPolling int        `json:"workers_polling"`
}

// EnvironmentKey is a key a self-hosted worker authenticates with: it may poll, ack, heartbeat and stop the work
// of its environment and nothing else. Only its hash is stored; Key is set once, in the answer that mints it.
type EnvironmentKey struct {
	Type          ObjectType `json:"type"` // "environment_key"
	ID            string     `json:"id"`
	EnvironmentID string     `json:"environment_id"`
	Name          string     `json:"name"`
	Key           string     `json:"key,omitempty"`
	Hash          string     `json:"-"`
	Hint          string     `json:"hint"` // the last four characters
	CreatedAt     time.Time  `json:"created_at"`
	RevokedAt     *time.Time `json:"revoked_at"`
}

// NewEnvironmentKeySecret returns a fresh environment key secret (about 234 random bits).
func NewEnvironmentKeySecret() string {
	return EnvironmentKeyPrefix + NewID("")[4:] + NewID("")[4:20]
}

// NewSessionsToken returns a fresh per-item sessions token.
func NewSessionsToken() string {
	return SessionsTokenPrefix + NewID("")[4:] + NewID("")[4:20]
}

// WorkSecret is the secret of a delivered work item, in the format the SDK's worker parses: URL-safe base64 of
// a JSON object carrying the sessions token.
func WorkSecret(sessionsToken string) string {
	b, _ := json.Marshal(map[string]string{"sessions_token": sessionsToken})
	return base64.RawURLEncoding.EncodeToString(b)
}

// SessionsTokenFromSecret is the inverse of WorkSecret ("" if secret does not carry a token).
func SessionsTokenFromSecret(secret string) string {
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(secret, "="))
	if err != nil {
		return ""
	}
	var v struct {
		SessionsToken string `json:"sessions_token"`
	}
	if json.Unmarshal(raw, &v) != nil {
		return ""
	}
	return v.SessionsToken
}
