// Package store is the port to Corral's durable state: the resources (agents, environments, sessions, API keys,
// vaults and credentials with their sealed secrets) and each session's append-only event log, with the leases
// that fence the brains working on sessions.
//
// Adapters (sqlite, postgres) implement Store and pass the conformance suite in storetest. Every method takes a
// context and, where it takes more than an id, a *Params struct; errors are the sentinels below, wrapped.
package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/corralhq/corral/internal/apitype"
)

// Sentinel errors. Adapters wrap them; callers test with errors.Is.
var (
	// ErrNotFound: no such resource, or it was deleted.
	ErrNotFound = errors.New("not found")
	// ErrConflict: a condition of the write did not hold (stale agent version, wrong expected sequence,
	// duplicate id).
	ErrConflict = errors.New("conflict")
	// ErrLeaseLost: the caller's lease on the session is no longer the current one (expired, reclaimed or
	// released). A brain that gets it must stop working on the session.
	ErrLeaseLost = errors.New("lease lost")
	// ErrNoWork: no session is runnable right now.
	ErrNoWork = errors.New("no runnable session")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store closed")
)

// CommitObserver is told the size of each group commit of an adapter's write batcher: how many writes (appends
// and other writes) went into one transaction. Its method must be cheap and safe for concurrent use.
type CommitObserver interface {
	GroupCommit(writes int)
}

// CommitsObserved is implemented by adapters that group writes into commits (sqlite and postgres): they report
// each group to the observer they are given (nil: none).
type CommitsObserved interface {
	ObserveCommits(CommitObserver)
}

// CommitHook holds an adapter's CommitObserver; the zero value observes nothing.
type CommitHook struct {
	o atomic.Pointer[CommitObserver]
}

// Set sets the observer (nil: none).
func (h *CommitHook) Set(o CommitObserver) {
	if o == nil {
		h.o.Store(nil)
		return
	}
	h.o.Store(&o)
}

// Commit reports a group commit of n writes.
func (h *CommitHook) Commit(n int) {
	if o := h.o.Load(); o != nil {
		(*o).GroupCommit(n)
	}
}

// Store is everything Corral keeps durably.
type Store interface {
	AgentStore
	EnvironmentStore
	SessionStore
	EventStore
	LeaseStore
	APIKeyStore
	PreviewStore
	VaultStore
	WorkStore
	EnvironmentKeyStore
	FileStore
	SkillStore
	StatsStore
	LeaderStore

	// Capabilities says what this adapter does natively.
	Capabilities() Capabilities
	// Close releases the store's connections and goroutines.
	Close() error
}

// StatsStore counts what the metrics show at each scrape.
type StatsStore interface {
	// Stats counts the sessions by status (archived ones left out) and the work items waiting for a worker.
	Stats(ctx context.Context) (*Stats, error)
}

// Stats are the counts of StatsStore.Stats.
type Stats struct {
	// Sessions counts the sessions not archived, by status (idle, running, rescheduling, terminated).
	Sessions map[string]int
	// WorkQueued counts the work items of every self-hosted environment that are queued and not delivered.
	WorkQueued int
}

// Capabilities describes an adapter.
type Capabilities struct {
	Name string // "sqlite" or "postgres"
	// CrossProcessNotify: subscriptions are woken by appends made in other processes (LISTEN/NOTIFY), not only
	// by appends through this Store value. Without it, readers must also poll.
	CrossProcessNotify bool
}

// ListParams pages a list of resources ordered by (created_at, id).
type ListParams struct {
	Limit           int     // at most this many items; adapters cap nothing, callers validate
	After           *Cursor // continue after this item
	Desc            bool    // newest first
	IncludeArchived bool
	CreatedAfter    *time.Time // created_at > t  (gt)
	CreatedFrom     *time.Time // created_at >= t (gte)
	CreatedBefore   *time.Time // created_at < t  (lt)
	CreatedTo       *time.Time // created_at <= t (lte)
}

// Cursor is the position of an item in a (created_at, id) ordered list.
type Cursor struct {
	CreatedAt time.Time
	ID        string
}

// AgentStore keeps agents and their immutable versions.
type AgentStore interface {
	// AgentCreate stores version 1 of a new agent.
	AgentCreate(ctx context.Context, a *apitype.Agent) error
	// AgentGet returns the agent at a version (0 = latest), with archived_at of the agent.
	AgentGet(ctx context.Context, p *AgentGetParams) (*apitype.Agent, error)
	// AgentPutVersion stores a new version a.Version of an existing agent. It fails with ErrConflict unless
	// the current latest version is a.Version-1: two concurrent updates cannot both win.
	AgentPutVersion(ctx context.Context, a *apitype.Agent) error
	// AgentArchive marks the agent archived (idempotent) and returns its latest version.
	AgentArchive(ctx context.Context, id string, at time.Time) (*apitype.Agent, error)
	// AgentList lists the latest version of each agent.
	AgentList(ctx context.Context, p *ListParams) ([]apitype.Agent, error)
	// AgentVersionList lists an agent's versions, newest first; After.ID is unused, After.CreatedAt unused:
	// paging is by version (AfterVersion).
	AgentVersionList(ctx context.Context, p *AgentVersionListParams) ([]apitype.Agent, error)
}

// AgentGetParams selects an agent version.
type AgentGetParams struct {
	ID      string
	Version int // 0 = latest
}

// AgentVersionListParams pages an agent's versions, newest first.
type AgentVersionListParams struct {
	ID            string
	Limit         int
	BeforeVersion int // only versions < this; 0 = from the latest
}

// EnvironmentStore keeps environments.
type EnvironmentStore interface {
	EnvironmentCreate(ctx context.Context, e *apitype.Environment) error
	EnvironmentGet(ctx context.Context, id string) (*apitype.Environment, error)
	// EnvironmentUpdate reads the environment, applies fn and writes the result, atomically.
	EnvironmentUpdate(ctx context.Context, id string, fn func(*apitype.Environment) error) (*apitype.Environment, error)
	EnvironmentList(ctx context.Context, p *ListParams) ([]apitype.Environment, error)
	EnvironmentDelete(ctx context.Context, id string) error
	// EnvironmentImageSet records the status of the environment's image build (SetImage's rule: only over a
	// status of the same image, so a build of a package list the environment no longer has cannot overwrite
	// the current one: ErrConflict). The environment's updated_at stays.
	EnvironmentImageSet(ctx context.Context, id string, img *apitype.EnvironmentImage) error
}

// SetImage is EnvironmentImageSet's rule, which both adapters apply: e gets img if it has no image status or
// one of the same image id; otherwise ErrConflict.
func SetImage(e *apitype.Environment, img *apitype.EnvironmentImage) error {
	if e.Image != nil && e.Image.ID != img.ID {
		return fmt.Errorf("environment %s: image %s is no longer its image (%s): %w", e.ID, img.ID, e.Image.ID, ErrConflict)
	}
	c := *img
	if img.Error != nil {
		be := *img.Error
		c.Error = &be
	}
	e.Image = &c
	return nil
}

// SessionStore keeps sessions. A session's status, usage and scheduling state are owned by the store and the
// brain; the rest of the document by the API.
type SessionStore interface {
	// SessionCreate stores a new session and appends its initial events in the same transaction, marking it
	// runnable when there are any.
	SessionCreate(ctx context.Context, p *SessionCreateParams) (*apitype.Session, []apitype.Event, error)
	SessionGet(ctx context.Context, id string) (*apitype.Session, error)
	// SessionUpdate reads the session, applies fn and writes the result, atomically. fn must not change
	// status or usage; those belong to EventAppend.
	SessionUpdate(ctx context.Context, id string, fn func(*apitype.Session) error) (*apitype.Session, error)
	SessionList(ctx context.Context, p *SessionListParams) ([]apitype.Session, error)
	// SessionDelete removes the session and its log. Subscribers are woken; their next read finds ErrNotFound.
	SessionDelete(ctx context.Context, id string) error
}

// SessionCreateParams creates a session.
type SessionCreateParams struct {
	Session       *apitype.Session
	InitialEvents []apitype.NewEvent
	// ResourceSecrets are stored with the session, in the same transaction (as ResourceSecretPut would): a
	// repository's sealed authorization_token is there before anyone can act on the session.
	ResourceSecrets []SealedSecret
}

// SessionListParams filters and pages sessions.
type SessionListParams struct {
	ListParams
	AgentID      string
	AgentVersion int
	Statuses     []string
}

// EventStore is the session log.
type EventStore interface {
	// EventAppend appends events to a session's log atomically, with contiguous sequence numbers, and returns
	// them with ids, sequence numbers and times assigned. It returns only once the events are durable. An event
	// with NewEvent.ID set is stored under that id; an id some event already has gives ErrConflict (and appends
	// nothing).
	//
	// Conditions: with Lease set, the lease must be the session's current, unexpired lease (else
	// ErrLeaseLost); with ExpectedSeq > 0, the first new event must get exactly that sequence number (else
	// ErrConflict). An unknown or deleted session gives ErrNotFound.
	EventAppend(ctx context.Context, p *EventAppendParams) ([]apitype.Event, error)
	// EventList returns a slice of a session's log. Its cost is proportional to the slice, not the log.
	EventList(ctx context.Context, p *EventListParams) ([]apitype.Event, error)
	// EventGet returns one event of a session by its id (ErrNotFound if the session has no such event).
	EventGet(ctx context.Context, sessionID, eventID string) (*apitype.Event, error)
	// EventMarkProcessed sets processed_at on client events (by sequence number) that have none. The lease
	// fences it like an append.
	EventMarkProcessed(ctx context.Context, p *EventMarkProcessedParams) error
	// Subscribe returns a channel that receives a value (coalesced) whenever the session may have new events,
	// and a function that ends the subscription. Readers re-read the log from their last sequence number, so a
	// missed or spurious wake-up costs nothing. Adapters without CrossProcessNotify only see appends made
	// through this Store value; readers poll as well.
	Subscribe(sessionID string) (<-chan struct{}, func())
}

// PreviewMaxBytes bounds one preview payload: what a PostgreSQL notification carries, less room for the
// session id. Publishers split bigger previews (a long text fragment goes as several deltas).
const PreviewMaxBytes = 7800

// PreviewStore carries stream previews: event_start / event_delta frames a brain publishes while a model answer
// streams, before the answer's events are appended. Previews are ephemeral and best effort: never stored, not
// replayed, dropped for a subscriber that does not keep up, lost while a connection is down. The final event
// always comes through the log, so a client that misses previews misses nothing but latency.
type PreviewStore interface {
	// PreviewPublish delivers payload (UTF-8 text without NUL bytes, at most PreviewMaxBytes; in practice one
	// JSON object) to the session's current preview subscribers, in this process and, with CrossProcessNotify,
	// in others. It returns once the preview is handed over (for postgres: its notification committed), so
	// previews published before an append reach a subscriber before the append's wake-up. Having no
	// subscriber is not an error.
	PreviewPublish(ctx context.Context, sessionID string, payload []byte) error
	// PreviewSubscribe returns a channel that receives the session's previews in publication order (a slow
	// reader's channel drops new previews while full, rather than block publishers), and a function that ends
	// the subscription. The channel is never closed.
	PreviewSubscribe(sessionID string) (<-chan []byte, func())
}

// CheckPreview validates a preview payload before an adapter publishes it.
func CheckPreview(payload []byte) error {
	switch {
	case len(payload) == 0:
		return errors.New("empty preview")
	case len(payload) > PreviewMaxBytes:
		return fmt.Errorf("preview of %d bytes exceeds %d", len(payload), PreviewMaxBytes)
	case !utf8.Valid(payload) || bytes.IndexByte(payload, 0) >= 0:
		return errors.New("preview is not UTF-8 text without NUL bytes")
	}
	return nil
}

// EventAppendParams appends events to a session.
type EventAppendParams struct {
	SessionID   string
	Events      []apitype.NewEvent
	Lease       *Lease // a brain's append: fenced by the lease
	ExpectedSeq int64  // if > 0, the sequence number the first event must get

	// Wake marks the session runnable (a client event a brain must act on), in the same transaction.
	Wake bool
	// Status, if set, becomes the session's status in the same transaction, unless the session is terminated:
	// terminated is final, and later appends (a brain finishing its last write) leave it so.
	Status string
	// Usage, if set, replaces the session's accumulated usage in the same transaction.
	Usage *apitype.SessionUsage
	// ActiveSeconds, if > 0, is added to the session's active time.
	ActiveSeconds float64
	// MarkProcessed lists earlier events of the session (by sequence number) whose processed_at, where unset,
	// becomes the append's time, in the same transaction: a brain announces a model call and records which
	// client events it picked up in one write, and a crash can never leave one without the other.
	MarkProcessed []int64
	// Release, with Lease, releases the lease in the same transaction, as LeaseRelease would: a brain ends its
	// work on a session with the append that idles it, in one write.
	Release bool
}

// CheckEvents validates events before an adapter appends them: each has a type, and its data, when set, is one
// JSON object (empty data is stored as {}). A log entry that could not be encoded would fail every later read
// of its session, so adapters refuse it rather than store it.
//
// An event with an ID must have the event prefix; two events of one append with the same ID give ErrConflict.
func CheckEvents(events []apitype.NewEvent) error {
	var ids map[string]bool
	for i, e := range events {
		if e.Type == "" {
			return fmt.Errorf("event %d has no type", i)
		}
		if e.ID != "" {
			if !apitype.HasPrefix(e.ID, apitype.PrefixEvent) || len(e.ID) > 128 {
				return fmt.Errorf("event %d: id %q is not an event id (%s...)", i, e.ID, apitype.PrefixEvent)
			}
			if ids[e.ID] {
				return fmt.Errorf("event %d: id %s given twice: %w", i, e.ID, ErrConflict)
			}
			if ids == nil {
				ids = map[string]bool{}
			}
			ids[e.ID] = true
		}
		if len(e.Data) == 0 {
			continue
		}
		if d := bytes.TrimSpace(e.Data); len(d) == 0 || d[0] != '{' || !json.Valid(d) {
			return fmt.Errorf("event %d (%s): data is not a JSON object", i, e.Type)
		}
	}
	return nil
}

// EventListParams selects a slice of a session's log.
type EventListParams struct {
	SessionID string
	AfterSeq  int64 // seq > AfterSeq
	BeforeSeq int64 // if > 0, seq < BeforeSeq
	Types     []string
	// Time filters on created_at (the append time; equal to processed_at for every server event).
	CreatedAfter, CreatedFrom, CreatedBefore, CreatedTo *time.Time
	Desc                                                bool // newest first: with BeforeSeq, "the Limit events before BeforeSeq"
	Limit                                               int  // required, > 0
	// MaxBytes, if > 0, also ends the page at the first event that brings the length of its events' Data to
	// MaxBytes or more, so a page holds at least one event: a reader bounds the bytes it holds, not only the
	// number of events.
	MaxBytes int
}

// EventMarkProcessedParams marks client events processed.
type EventMarkProcessedParams struct {
	SessionID string
	Lease     *Lease
	Seqs      []int64
	At        time.Time
}

// Lease is a brain's claim on a session. Token fences every write the brain makes.
type Lease struct {
	SessionID string
	Owner     string
	Token     string
	ExpiresAt time.Time
	// WakeSeq is the session's wake counter when the lease was taken or last renewed; releasing with it
	// tells the store which wake-ups the brain has handled.
	WakeSeq int64
}

// LeaseStore schedules sessions onto brains.
type LeaseStore interface {
	// LeaseClaim claims up to p.Limit runnable sessions whose lease is free or expired, for ttl, those woken
	// longest ago first, each with a lease of its own. A session is runnable when it has been woken (EventAppend
	// with Wake) since its last release. ErrNoWork when none is.
	LeaseClaim(ctx context.Context, p *LeaseClaimParams) ([]*Lease, error)
	// LeaseRenew extends the lease by ttl from now, returning the renewed lease, or ErrLeaseLost. It also
	// refreshes WakeSeq.
	LeaseRenew(ctx context.Context, l *Lease, ttl time.Duration) (*Lease, error)
	// LeaseRelease gives the session up. Wake-ups up to l.WakeSeq count as handled: if the session was woken
	// again since, it stays runnable for the next claim. ErrLeaseLost if the lease is no longer held.
	LeaseRelease(ctx context.Context, l *Lease) error
	// WaitRunnable returns a channel that receives a value when some session may have become runnable.
	WaitRunnable() (<-chan struct{}, func())
}

// LeaseClaimParams claims runnable sessions.
type LeaseClaimParams struct {
	Owner     string
	TTL       time.Duration
	SessionID string // if set, claim only this session (and only if runnable)
	// Limit is the most sessions one claim takes (0 means 1): a brain with several idle workers claims for
	// all of them in one write.
	Limit int
}

// MaxClaimLimit caps LeaseClaimParams.Limit.
const MaxClaimLimit = 256

// ClaimLimit returns p's effective limit, or an error naming the field.
func (p *LeaseClaimParams) ClaimLimit() (int, error) {
	switch {
	case p.TTL <= 0:
		return 0, fmt.Errorf("ttl must be > 0, got %s", p.TTL)
	case p.Limit < 0 || p.Limit > MaxClaimLimit:
		return 0, fmt.Errorf("limit must be in [0, %d], got %d", MaxClaimLimit, p.Limit)
	case p.SessionID != "":
		return 1, nil
	}
	return max(p.Limit, 1), nil
}

// APIKeyStore keeps hashed API keys.
type APIKeyStore interface {
	APIKeyCreate(ctx context.Context, k *apitype.APIKey) error
	// APIKeyByHash finds an unrevoked key by the hash of its secret.
	APIKeyByHash(ctx context.Context, hash string) (*apitype.APIKey, error)
	APIKeyList(ctx context.Context) ([]apitype.APIKey, error)
	APIKeyRevoke(ctx context.Context, id string, at time.Time) error
}
