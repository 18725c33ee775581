package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

var dreams = &table[apitype.Dream]{
	what: "dream", name: "dreams", alias: "d", archivable: true,
	sel:  `SELECT d.doc, d.archived_at FROM dreams d`,
	scan: scanDoc("dream", func(d *apitype.Dream, at *time.Time) { d.ArchivedAt = at }),
	put: func(ctx context.Context, tx pgx.Tx, d, _ *apitype.Dream) error {
		if err := store.CheckDream(d); err != nil {
			return err
		}
		doc, err := json.Marshal(d)
		if err != nil {
			return fmt.Errorf("encode: %w", err)
		}
		_, err = tx.Exec(ctx, `UPDATE dreams SET doc = $2, archived_at = $3, status = $4, target = $5 WHERE id = $1`,
			d.ID, doc, d.ArchivedAt, string(d.Status), nullString(store.DreamTarget(d)))
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
		return fmt.Errorf("dream create: encode: %w", err)
	}
	return dreams.create(ctx, s, `INSERT INTO dreams (id, created_at, archived_at, status, target, doc)
		VALUES ($1, $2, $3, $4, $5, $6)`, d.ID, d.CreatedAt, d.ArchivedAt, string(d.Status),
		nullString(store.DreamTarget(d)), doc)
}

// DreamGet returns a dream.
func (s *Store) DreamGet(ctx context.Context, id string) (*apitype.Dream, error) {
	return dreams.get(ctx, s, "d.id = $1", id)
}

// DreamUpdate applies fn to the dream under a row lock and stores the result.
func (s *Store) DreamUpdate(ctx context.Context, id string, fn func(*apitype.Dream) error) (*apitype.Dream, error) {
	return dreams.update(ctx, s, id, fn, store.KeepDream)
}

// DreamList lists dreams.
func (s *Store) DreamList(ctx context.Context, p *store.DreamListParams) ([]apitype.Dream, error) {
	q := dreams.query()
	if len(p.Statuses) > 0 {
		st := make([]string, len(p.Statuses))
		for i, v := range p.Statuses {
			st[i] = string(v)
		}
		fmt.Fprintf(&q.sql, " AND d.status = ANY(%s)", q.arg(st))
	}
	return dreams.list(ctx, s, q, &p.ListParams)
}

// DreamListActive lists the dreams that have not ended, oldest first.
func (s *Store) DreamListActive(ctx context.Context, limit int) ([]apitype.Dream, error) {
	q := dreams.query()
	q.sql.WriteString(" AND d.status IN ('pending', 'running')")
	return dreams.list(ctx, s, q, &store.ListParams{Limit: limit, IncludeArchived: true})
}

// nullString is s as a nullable column: NULL if empty.
func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
