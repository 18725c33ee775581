package store

import (
	"context"
	"encoding/json"
	"fmt"

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

// ThreadWrites is what an append or a session create writes of ts to the session: each thread needs an id, and is
// the session's; a thread given twice is written once, the later one's changes applied to the earlier under
// KeepThread's rule, as two writes in turn would be (both adapters write a row once per statement).
func ThreadWrites(sessionID string, ts []apitype.SessionThread) ([]apitype.SessionThread, error) {
	out := make([]apitype.SessionThread, 0, len(ts))
	at := map[string]int{}
	for i, t := range ts {
		if t.ID == "" {
			return nil, fmt.Errorf("thread %d has no id", i)
		}
		t.SessionID = sessionID
		if j, ok := at[t.ID]; ok {
			KeepThread(&t, &out[j])
			out[j] = t
			continue
		}
		at[t.ID] = len(out)
		out = append(out, t)
	}
	return out, nil
}

// DecodeThread reads a stored thread: its document, with the usage and stats of their own columns (which the
// store writes apart from the document, and which override its copies; empty: none yet).
func DecodeThread(doc, usage, stats []byte) (*apitype.SessionThread, error) {
	var t apitype.SessionThread
	if err := json.Unmarshal(doc, &t); err != nil {
		return nil, fmt.Errorf("decode thread: %w", err)
	}
	t.Usage, t.Stats = nil, nil
	if len(usage) > 0 {
		if err := json.Unmarshal(usage, &t.Usage); err != nil {
			return nil, fmt.Errorf("decode thread usage: %w", err)
		}
	}
	if len(stats) > 0 {
		if err := json.Unmarshal(stats, &t.Stats); err != nil {
			return nil, fmt.Errorf("decode thread stats: %w", err)
		}
	}
	return &t, nil
}

// KeepThread is what a write of a stored thread through EventAppendParams.Threads keeps of the stored one: its
// identity, agent, parent, creation and archive times. The write sets its status, usage, stats and updated_at.
func KeepThread(next, cur *apitype.SessionThread) {
	next.Type, next.ID, next.SessionID, next.ParentThreadID = cur.Type, cur.ID, cur.SessionID, cur.ParentThreadID
	next.WorkflowRunID, next.Agent, next.CreatedAt, next.ArchivedAt = cur.WorkflowRunID, cur.Agent, cur.CreatedAt, cur.ArchivedAt
}
