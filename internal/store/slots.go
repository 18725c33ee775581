package store

import (
	"context"
	"time"
)

// SlotStore keeps counted slots that every process of a store shares, each held until it is released or its
// lease ends: a workspace's live sandboxes, whichever brain runs them. A process that dies leaves its slots to
// expire.
type SlotStore interface {
	// SlotTake takes the slot id in group, or renews it if it is held, until until: a new slot is taken only
	// if the group holds fewer than max slots that have not expired at now. It reports whether the slot is
	// held, and how many slots of the group are (the one taken included).
	SlotTake(ctx context.Context, group, id string, max int, now, until time.Time) (held bool, n int, err error)
	// SlotRelease frees the slot id (none: nothing to do).
	SlotRelease(ctx context.Context, id string) error
}
