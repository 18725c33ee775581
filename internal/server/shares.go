package server

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/corralhq/corral/internal/store"
)

// sandboxLease is how long a live sandbox's slot lasts without renewal: a brain that dies frees its
// workspaces' slots after it. A live sandbox renews its slot every third of it.
const sandboxLease = 2 * time.Minute

// workspaceSandboxes is the sandbox.Quota of a workspace's live sandboxes: at most max of a workspace's sessions
// hold a sandbox at once, across every brain of the store (store.SlotStore).
type workspaceSandboxes struct {
	store interface {
		store.Owners
		store.SlotStore
	}
	max int
	log *slog.Logger
}

// Admit takes the session's slot in its workspace's group, and renews it until done.
func (q *workspaceSandboxes) Admit(ctx context.Context, sessionID string) (func(), error) {
	ws, err := q.store.OwnerOf(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	group, id := "sandboxes:"+ws, "sandbox:"+sessionID
	now := time.Now()
	held, n, err := q.store.SlotTake(ctx, group, id, q.max, now, now.Add(sandboxLease))
	if err != nil {
		return nil, err
	}
	if !held {
		return nil, fmt.Errorf("workspace %s has %d live sandboxes, its share: this tool runs once one of its "+
			"sessions' sandboxes closes (an unused sandbox closes after a while); retry later", ws, n)
	}
	stop, renewing := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(renewing)
		t := time.NewTicker(sandboxLease / 3)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				// Renewed whatever the count: the slot is held. A failure leaves it to expire.
				if _, _, err := q.store.SlotTake(context.Background(), group, id, q.max, now, now.Add(sandboxLease)); err != nil {
					q.log.Warn("renew a sandbox's slot", "session", sessionID, "err", err)
				}
			}
		}
	}()
	return func() {
		close(stop)
		<-renewing // no renewal after the release
		if err := q.store.SlotRelease(context.Background(), id); err != nil {
			q.log.Warn("release a sandbox's slot (it expires)", "session", sessionID, "err", err)
		}
	}, nil
}
