package store

import (
	"context"

	"github.com/corralhq/corral/internal/apitype"
)

// ThreadStore keeps the threads of multi-agent sessions. A thread is created, and its status, usage and stats
// change, only with the events that say so: through EventAppendParams.Threads (and SessionCreateParams.Threads
// for the primary), in the append's transaction. Archiving is the API's.
type ThreadStore interface {
	// ThreadGet returns a session's thread (ErrNotFound if the session has no such thread).
	ThreadGet(ctx context.Context, sessionID, threadID string) (*apitype.SessionThread, error)
	// ThreadList lists a session's threads ordered by (created_at, id), archived ones included.
	ThreadList(ctx context.Context, p *ThreadListParams) ([]apitype.SessionThread, error)
	// ThreadArchive archives a thread if check, called on the thread as read in the transaction, returns nil
	// (its error otherwise, unchanged). Archiving an archived thread changes nothing.
	ThreadArchive(ctx context.Context, sessionID, threadID string, check func(*apitype.SessionThread) error) (*apitype.SessionThread, error)
}

// ThreadListParams filters and pages a session's threads.
type ThreadListParams struct {
	SessionID string
	Statuses  []string // any of them; none: every status
	Limit     int      // required, > 0
	After     *Cursor  // continue after this thread
}

// KeepThread is what a write of a stored thread through EventAppendParams.Threads keeps of the stored one: its
// identity, agent, parent, creation and archive times. The write sets its status, usage, stats and updated_at.
func KeepThread(next, cur *apitype.SessionThread) {
	next.Type, next.ID, next.SessionID, next.ParentThreadID = cur.Type, cur.ID, cur.SessionID, cur.ParentThreadID
	next.WorkflowRunID, next.Agent, next.CreatedAt, next.ArchivedAt = cur.WorkflowRunID, cur.Agent, cur.CreatedAt, cur.ArchivedAt
}
