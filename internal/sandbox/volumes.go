package sandbox

import (
	"context"
	"errors"
)

// Volumes gives each session's workspace a filesystem of its own, bounded in bytes and inodes, so that no
// sandbox can fill the filesystem the server's data lives on (internal/sandbox/volume: a loop-mounted image
// per workspace). The Pool attaches a session's workspace before its first sandbox and detaches it when the
// session's slot goes (idle reaping, Close, Stop); the files stay in the volume across sandboxes.
type Volumes interface {
	// Attach makes workspace directory dir (WorkspaceRoot/<session id>) the session's volume, creating the
	// volume on the workspace's first use. It fails with a reason the session's tool calls can show (no
	// space left for a new volume, no loop device). Each Attach is undone by one Detach.
	Attach(ctx context.Context, dir string) error
	// Detach undoes one Attach; after the last, the volume is unmounted (its files stay).
	Detach(dir string) error
	// Remove deletes the volume of dir, whose session is gone. Idempotent.
	Remove(dir string) error
}

// Reclaimer is implemented by Volumes whose other checks of the reserve (internal/sandbox/volume's CheckSpace,
// for the Files API's writes) can make room as Attach's refusal does: NewPool gives them reclaim, which reaps
// the pool's longest idle sandbox and reports whether there was one.
type Reclaimer interface {
	SetReclaim(reclaim func() bool)
}

// ErrNoRoom is what a Volumes' refusal to attach another volume wraps (internal/sandbox/volume's ErrReserve: the
// disk is down to its reserve). The Pool answers it by reaping its idle sandboxes, the longest idle first, so
// that a session holding volumes it does not use never keeps another session's tools from running.
var ErrNoRoom = errors.New("no room for another sandbox's volumes")
