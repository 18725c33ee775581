package store

import (
	"context"
	"fmt"

	"github.com/corralhq/corral/internal/apitype"
)

// DreamStore keeps dreams. A dream's status is a column of its own beside its document, so that lists filter on
// it and at most one dream that has not ended targets a memory store with update_existing (ErrConflict).
type DreamStore interface {
	// DreamCreate stores a new dream; ErrConflict if the id exists, or if d writes its input store
	// (update_existing) while another dream that has not ended does the same to that store.
	DreamCreate(ctx context.Context, d *apitype.Dream) error
	// DreamGet returns a dream, archived or not; ErrNotFound if there is none.
	DreamGet(ctx context.Context, id string) (*apitype.Dream, error)
	// DreamUpdate reads the dream, applies fn and writes the result, atomically (the Update rule; KeepDream).
	DreamUpdate(ctx context.Context, id string, fn func(*apitype.Dream) error) (*apitype.Dream, error)
	// DreamList lists dreams by (created_at, id) with p's filters.
	DreamList(ctx context.Context, p *DreamListParams) ([]apitype.Dream, error)
	// DreamListActive lists the dreams that have not ended (pending or running, archived or not), oldest
	// first, at most limit (0: all): the work of the runner that drives them.
	DreamListActive(ctx context.Context, limit int) ([]apitype.Dream, error)
}

// DreamListParams filters and pages dreams.
type DreamListParams struct {
	ListParams
	// Statuses keeps the dreams with one of these statuses (none: all).
	Statuses []apitype.DreamStatus
}

// KeepDream is what DreamUpdate keeps of the dream read: its id, its inputs and creation, and a terminal
// status (a dream that has ended does not start again: fn may still change its usage and archive it).
func KeepDream(next, cur *apitype.Dream) {
	next.ID, next.Inputs, next.CreatedAt, next.OutputBehavior = cur.ID, cur.Inputs, cur.CreatedAt, cur.OutputBehavior
	if cur.Status.Terminal() {
		next.Status, next.EndedAt, next.Error = cur.Status, cur.EndedAt, cur.Error
	}
}

// DreamTarget is the memory store a dream locks against other dreams while it has not ended: its input store
// when it updates it (update_existing), else "" (a dream that creates a store locks nothing). Adapters keep it in
// a column with a unique index over the dreams that have not ended.
func DreamTarget(d *apitype.Dream) string {
	if d.Status.Terminal() || d.OutputBehavior.Type != apitype.DreamUpdateExisting {
		return ""
	}
	return d.OutputBehavior.MemoryStoreID
}

// CheckDream is what both adapters check of a dream before they write it: a known status.
func CheckDream(d *apitype.Dream) error {
	if !d.Status.Valid() {
		return fmt.Errorf("dream %s: unknown status %q", d.ID, d.Status)
	}
	return nil
}
