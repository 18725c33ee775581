package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/corralhq/corral/internal/store"
)

var files = &table[store.File]{
	what: "file", name: "files", alias: "f",
	sel:  `SELECT f.sha256, f.blob_key, f.doc FROM files f`,
	scan: scanFile,
}

// FileCreate stores a new file's metadata; ErrConflict if the id exists.
func (s *Store) FileCreate(ctx context.Context, f *store.File) error {
	doc, err := json.Marshal(&f.File)
	if err != nil {
		return fmt.Errorf("file create: encode: %w", err)
	}
	scope := ""
	if f.Scope != nil {
		scope = f.Scope.ID
	}
	return files.create(ctx, s, `INSERT INTO files (id, created_at, scope_id, sha256, blob_key, expires_at, doc)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, f.ID, f.CreatedAt, scope, f.SHA256, f.BlobKey, f.ExpiresAt, doc)
}

// FileGet returns a file's metadata.
func (s *Store) FileGet(ctx context.Context, id string) (*store.File, error) {
	return files.get(ctx, s, "f.id = $1", id)
}

// FileList lists files.
func (s *Store) FileList(ctx context.Context, p *store.FileListParams) ([]store.File, error) {
	q := files.query()
	if p.ScopeID != "" {
		fmt.Fprintf(&q.sql, " AND f.scope_id = %s", q.arg(p.ScopeID))
	}
	if len(p.IDs) > 0 {
		fmt.Fprintf(&q.sql, " AND f.id = ANY(%s)", q.arg(p.IDs))
	}
	return files.list(ctx, s, q, &p.ListParams)
}

// FileExpired lists files expired at t.
func (s *Store) FileExpired(ctx context.Context, t time.Time, limit int) ([]store.File, error) {
	return files.rows(ctx, s, "file expired", files.sel+` WHERE f.expires_at IS NOT NULL AND f.expires_at <= $1
		ORDER BY f.expires_at, f.id LIMIT $2`, t, max(limit, 1))
}

// FileDelete removes a file's metadata.
func (s *Store) FileDelete(ctx context.Context, id string) error {
	return files.delete(ctx, s, "id = $1", id)
}

func scanFile(row pgx.Row) (*store.File, error) {
	var (
		f   store.File
		doc []byte
	)
	if err := row.Scan(&f.SHA256, &f.BlobKey, &doc); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(doc, &f.File); err != nil {
		return nil, fmt.Errorf("decode file: %w", err)
	}
	return &f, nil
}
