package store

import (
	"context"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/apitype"
)

// WorkStore is the work queue of self-hosted environments: a session whose built-in tool calls wait for a worker
// gets a work item; a worker polls for it, acks it, and holds it by heartbeating a lease. A holder that stops
// heartbeating loses the lease, and the item goes back to the queue, held until the session's brain has settled
// the calls that holder may have run (WorkResume).
type WorkStore interface {
	// WorkEnsure returns the session's work item that is not stopping or stopped, queuing a new one (with
	// p.ID) when there is none. created says whether it queued one.
	WorkEnsure(ctx context.Context, p *WorkEnsureParams) (w *apitype.Work, created bool, err error)
	// WorkPoll first re-queues the environment's items whose lease expired (held, the session woken) and then
	// delivers the oldest deliverable item: queued, not held, and never polled or polled before
	// p.At - p.ReclaimAfter. The delivery records the worker, the poll time and the hash of the sessions token
	// it mints (a previous delivery's token stops working). ErrNoWork when nothing is deliverable.
	WorkPoll(ctx context.Context, p *WorkPollParams) (*apitype.Work, error)
	// WorkAck moves a delivered, queued item to starting with a lease of p.TTL. ErrConflict if it is not
	// queued and delivered (acked already, stopped, held).
	WorkAck(ctx context.Context, p *WorkAckParams) (*apitype.Work, error)
	// WorkHeartbeat extends the holder's lease. In starting or active, p.Expected must be the item's
	// LastHeartbeat ("" for none) and the lease unexpired, else ErrConflict with the current state in the
	// returned heartbeat; then the item becomes active with a lease of p.TTL. In stopping or stopped nothing is
	// compared or extended. A queued item gives ErrConflict.
	WorkHeartbeat(ctx context.Context, p *WorkHeartbeatParams) (*apitype.WorkHeartbeat, error)
	// WorkStop stops an item: stopped at once when queued or when p.Force, else stopping. Stopping an item a
	// worker had acked records LostSeq and wakes its session. ErrConflict if it is stopped already.
	WorkStop(ctx context.Context, p *WorkStopParams) (*apitype.Work, error)
	// WorkResume makes a held item deliverable again, once the brain has settled its calls up to LostSeq.
	WorkResume(ctx context.Context, environmentID, workID string) error
	// WorkGet returns an item of the environment.
	WorkGet(ctx context.Context, environmentID, workID string) (*apitype.Work, error)
	// WorkBySession returns the session's newest work item (ErrNotFound if it has none).
	WorkBySession(ctx context.Context, sessionID string) (*apitype.Work, error)
	// WorkByTokenHash returns the item whose current sessions token has this hash, whatever its state.
	WorkByTokenHash(ctx context.Context, hash string) (*apitype.Work, error)
	// WorkUpdateMetadata sets an item's metadata to what fn makes of its current metadata, in the write's
	// transaction, so that fn's checks hold for what is written; an error from fn aborts the update and is
	// returned (wrapped).
	WorkUpdateMetadata(ctx context.Context, environmentID, workID string, fn func(map[string]string) (map[string]string, error)) (*apitype.Work, error)
	// WorkList lists the environment's items by (created_at, id); IncludeArchived and the time filters are
	// ignored.
	WorkList(ctx context.Context, environmentID string, p *ListParams) ([]apitype.Work, error)
	// WorkStats counts the environment's queue; WorkersPolling is left to the caller.
	WorkStats(ctx context.Context, environmentID string) (*apitype.WorkQueueStats, error)
	// WaitWork returns a channel that receives a value when the environment may have deliverable work (in this
	// process, and with CrossProcessNotify in others), and a function that ends the subscription.
	WaitWork(environmentID string) (<-chan struct{}, func())
}

// WorkEnsureParams queues a session's work item.
type WorkEnsureParams struct {
	ID            string // the new item's id, used only if one is queued
	EnvironmentID string
	SessionID     string
	At            time.Time
}

// WorkPollParams delivers an item to a worker.
type WorkPollParams struct {
	EnvironmentID string
	WorkerID      string
	// ReclaimAfter: an item delivered but not acked for this long is delivered again.
	ReclaimAfter time.Duration
	// TokenHash is the hash of the sessions token the poll hands out with the item.
	TokenHash string
	// KeyID is the environment key the poll was made with: revoking it kills the token (EnvironmentKeyRevoke).
	KeyID string
	At    time.Time
}

// WorkAckParams acks a delivered item.
type WorkAckParams struct {
	EnvironmentID, WorkID string
	TTL                   time.Duration // the lease until the first heartbeat
	At                    time.Time
}

// WorkHeartbeatParams extends a lease.
type WorkHeartbeatParams struct {
	EnvironmentID, WorkID string
	Expected              string // the LastHeartbeat the worker saw ("" for none)
	TTL                   time.Duration
	At                    time.Time
}

// WorkStopParams stops an item.
type WorkStopParams struct {
	EnvironmentID, WorkID string
	Force                 bool
	At                    time.Time
}

// WorkKey is the Hub key of an environment's work wake-ups.
func WorkKey(environmentID string) string { return "work:" + environmentID }

// CheckWorkTTL validates a lease duration.
func CheckWorkTTL(ttl time.Duration) error {
	if ttl < time.Second {
		return fmt.Errorf("work lease ttl must be at least 1s, got %s", ttl)
	}
	return nil
}

// Heartbeat is the rule of WorkHeartbeat, which both adapters apply to the item as read in their transaction:
// the answer, with LeaseExtended when the adapter must write the new lease, or ErrConflict (412 on the wire)
// with the current state.
func Heartbeat(cur *apitype.Work, p *WorkHeartbeatParams) (*apitype.WorkHeartbeat, error) {
	hb := &apitype.WorkHeartbeat{Type: apitype.ObjectWorkHeartbeat, LastHeartbeat: cur.LastHeartbeat(), State: cur.State,
		TTLSeconds: cur.TTLSeconds}
	switch cur.State {
	case apitype.WorkStopping, apitype.WorkStopped:
		return hb, nil
	case apitype.WorkStarting, apitype.WorkActive:
		if cur.LeaseExpiresAt == nil || !cur.LeaseExpiresAt.After(p.At) || p.Expected != hb.LastHeartbeat {
			return hb, ErrConflict
		}
		at := p.At.UTC().Truncate(time.Microsecond)
		hb.LastHeartbeat, hb.LeaseExtended, hb.State = at.Format(time.RFC3339Nano), true, apitype.WorkActive
		hb.TTLSeconds = int(p.TTL / time.Second)
		return hb, nil
	}
	return hb, ErrConflict
}

// StopTransition is the rule of WorkStop: the state a stop moves cur to, and whether a worker had acked it (so
// that the session's calls so far may have run there). ErrConflict for a stopped item.
func StopTransition(cur *apitype.Work, force bool) (next apitype.WorkState, acked bool, err error) {
	switch cur.State {
	case apitype.WorkStopped:
		return "", false, ErrConflict
	case apitype.WorkQueued:
		return apitype.WorkStopped, false, nil
	}
	if force {
		return apitype.WorkStopped, true, nil
	}
	return apitype.WorkStopping, true, nil
}
