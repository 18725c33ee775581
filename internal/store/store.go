// Package store is the port to Corral's durable state: the resources (agents, environments, sessions, API keys,
// vaults and credentials with their sealed secrets) and each session's append-only event log, with the leases
// that fence the brains working on sessions.
//
// Adapters (sqlite, postgres) implement Store and pass the conformance suite in storetest. Every method takes a
// context and, where it takes more than an id, a *Params struct; errors are the sentinels below, wrapped.
package store

import (
	"errors"
	"sync/atomic"
	"time"
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
	// ErrSessionClosed: an append with EventAppendParams.Open found the session archived or terminated.
	ErrSessionClosed = errors.New("session archived or terminated")
	// ErrNoWork: no session is runnable right now.
	ErrNoWork = errors.New("no runnable session")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store closed")
	// ErrUnavailable: the database could not be reached, or dropped the connection mid-operation (it restarts,
	// or the network failed). The operation may be retried once it is back; a write that failed so may or may not
	// have been applied.
	ErrUnavailable = errors.New("store unavailable")
)

// Reachability is implemented by an adapter whose database is reached over a network: Unreachable reports
// whether err, returned by one of its methods, means the database could not be reached or dropped the
// connection, whether or not the adapter wrapped it in ErrUnavailable.
type Reachability interface {
	Unreachable(err error) bool
}

// IsUnavailable reports whether err, returned by st, means st's database could not be reached: ErrUnavailable,
// or an error st's Reachability recognizes.
func IsUnavailable(st any, err error) bool {
	if errors.Is(err, ErrUnavailable) {
		return true
	}
	r, ok := st.(Reachability)
	return ok && err != nil && r.Unreachable(err)
}

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
	ThreadStore
	LeaseStore
	APIKeyStore
	PreviewStore
	VaultStore
	WorkStore
	EnvironmentKeyStore
	FileStore
	SkillStore
	MemoryStore
	StatsStore
	LeaderStore
	DreamStore
	WebhookStore
	DeploymentStore
	TunnelStore
	WorkspaceStore
	RateStore
	SlotStore

	// Capabilities says what this adapter does natively.
	Capabilities() Capabilities
	// Close releases the store's connections and goroutines.
	Close() error
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
	// Workspace, if set, lists only the resources of that workspace (WorkspaceStore): for the lists of
	// resources that belong to a workspace themselves, not those of a parent's children.
	Workspace string
}

// Cursor is the position of an item in a (created_at, id) ordered list.
type Cursor struct {
	CreatedAt time.Time
	ID        string
}

// Update is the rule of every get-modify-put update (EnvironmentUpdate, SessionUpdate, VaultUpdate, ...), which
// both adapters apply to the row as read in their transaction: fn changes a copy of cur, then keep puts back on
// it what the store owns (the id at least), whatever fn did. An error from fn aborts the update.
func Update[T any](cur *T, fn func(*T) error, keep func(next, cur *T)) (*T, error) {
	next := *cur
	if err := fn(&next); err != nil {
		return nil, err
	}
	keep(&next, cur)
	return &next, nil
}

// Archive is the rule of archiving a resource that keeps its record: it is idempotent (an archived resource
// keeps its time: Archive reports false and changes nothing), else archived and updated become at.
func Archive(archived **time.Time, updated *time.Time, at time.Time) bool {
	if *archived != nil {
		return false
	}
	*archived, *updated = &at, at
	return true
}
