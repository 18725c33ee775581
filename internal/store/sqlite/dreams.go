package sqlite

import (
	"context"
	"encoding/json"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

var dreams = &table[apitype.Dream]{
	what: "dream", name: "dreams", alias: "d", archivable: true,
	sel:  `SELECT d.doc FROM dreams d`,
	scan: scanDoc[apitype.Dream]("dream", nil),
	put: func(w *wtx, d, _ *apitype.Dream) error {
		if err := store.CheckDream(d); err != nil {
			return err
		}
		doc, err := json.Marshal(d)
		if err != nil {
			return err
		}
		_, err = w.exec(`UPDATE dreams SET archived_at = ?, status = ?, target = ?, doc = ? WHERE id = ?`,
			nullMicros(d.ArchivedAt), string(d.Status), nullString(store.DreamTarget(d)), doc, d.ID)
		return err
	},
}

// DreamCreate stores a new dream; ErrConflict if the id exists or another dream that has not ended updates
// the same memory store.
func (s *Store) DreamCreate(ctx context.Context, d *apitype.Dream) error {
	if err := store.CheckDream(d); err != nil {
		return err
	}
	doc, err := json.Marshal(d)
	if err != nil {
		return writeErr(err, "create dream %s", d.ID)
	}
	return dreams.create(ctx, s, d.ID, `INSERT INTO dreams (id, created_at, archived_at, status, target, doc)
		VALUES (?, ?, ?, ?, ?, ?)`, d.ID, micros(d.CreatedAt), nullMicros(d.ArchivedAt), string(d.Status),
		nullString(store.DreamTarget(d)), doc)
}

// DreamGet returns a dream.
func (s *Store) DreamGet(ctx context.Context, id string) (*apitype.Dream, error) {
	return dreams.get(ctx, s, id, "d.id = ?", id)
}

// DreamUpdate applies fn to the dream and stores the result, atomically.
func (s *Store) DreamUpdate(ctx context.Context, id string, fn func(*apitype.Dream) error) (*apitype.Dream, error) {
	return dreams.update(ctx, s, id, fn, store.KeepDream)
}

// DreamList lists dreams.
func (s *Store) DreamList(ctx context.Context, p *store.DreamListParams) ([]apitype.Dream, error) {
	f := &filter{}
	if len(p.Statuses) > 0 {
		st := make([]any, len(p.Statuses))
		for i, v := range p.Statuses {
			st[i] = string(v)
		}
		f.add("d.status IN ("+placeholders(len(st))+")", st...)
	}
	return dreams.list(ctx, s, f, &p.ListParams)
}

// DreamListActive lists the dreams that have not ended, oldest first.
func (s *Store) DreamListActive(ctx context.Context, limit int) ([]apitype.Dream, error) {
	f := &filter{}
	f.add("d.status IN ('pending', 'running')")
	return dreams.list(ctx, s, f, &store.ListParams{Limit: limit, IncludeArchived: true})
}
