package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/apitype"
)

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
	// Wakes counts the wake-ups this process has delivered to the session's subscribers while it has had any.
	// A read of the log that begins after Wakes returned n sees every event of those n wake-ups, so a reader
	// woken when the count was at most n may take that read's result as its own (the API's streams share
	// their reads so).
	Wakes(sessionID string) uint64
}

// EventAppendParams appends events to a session.
type EventAppendParams struct {
	SessionID   string
	Events      []apitype.NewEvent
	Lease       *Lease // a brain's append: fenced by the lease
	ExpectedSeq int64  // if > 0, the sequence number the first event must get

	// Wake marks the session runnable (a client event a brain must act on), in the same transaction.
	Wake bool
	// Open refuses the append with ErrSessionClosed if the session is archived or terminated, in the same
	// transaction: a client's event never follows the end of a session.
	Open bool
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
	// Threads are written in the same transaction: one the session does not have yet is created as given; a
	// stored one takes the given status, usage, stats and updated_at (KeepThread says what it keeps).
	Threads []apitype.SessionThread
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

// EventScope says whose events a list reads.
type EventScope int

const (
	// ScopeSession is the session's stream: the primary thread's events and the children's cross-posted ones.
	ScopeSession EventScope = iota
	// ScopeThread is one thread's events only (EventListParams.Thread; "" the primary's).
	ScopeThread
	// ScopeAll is every thread's events.
	ScopeAll
)

// EventListParams selects a slice of a session's log.
type EventListParams struct {
	SessionID string
	Scope     EventScope
	Thread    string // with ScopeThread: "" the primary thread, else a child's id
	AfterSeq  int64  // seq > AfterSeq
	BeforeSeq int64  // if > 0, seq < BeforeSeq
	Types     []apitype.EventType
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
