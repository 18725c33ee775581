package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/store"
)

var files = &table[store.File]{
	what: "file", name: "files", alias: "f",
	sel:  `SELECT f.sha256, f.blob_key, f.doc FROM files f`,
	scan: scanFile,
}

// FileCreate stores a new file's metadata.
func (s *Store) FileCreate(ctx context.Context, f *store.File) error {
	doc, err := json.Marshal(&f.File)
	if err != nil {
		return writeErr(err, "create file %s", f.ID)
	}
	scope := ""
	if f.Scope != nil {
		scope = f.Scope.ID
	}
	return files.create(ctx, s, f.ID, `INSERT INTO files (id, created_at, scope_id, sha256, blob_key, expires_at, doc)
		VALUES (?, ?, ?, ?, ?, ?, ?)`, f.ID, micros(f.CreatedAt), scope, f.SHA256, f.BlobKey, nullMicros(f.ExpiresAt), doc)
}

// FileGet returns a file's metadata.
func (s *Store) FileGet(ctx context.Context, id string) (*store.File, error) {
	return files.get(ctx, s, id, "f.id = ?", id)
}

// FileList lists files.
func (s *Store) FileList(ctx context.Context, p *store.FileListParams) ([]store.File, error) {
	var f filter
	if p.ScopeID != "" {
		f.add("f.scope_id = ?", p.ScopeID)
	}
	if len(p.IDs) > 0 {
		f.add("f.id IN ("+placeholders(len(p.IDs))+")", anys(p.IDs)...)
	}
	return files.list(ctx, s, &f, &p.ListParams)
}

// FileDelete removes a file's metadata.
func (s *Store) FileDelete(ctx context.Context, id string) error {
	return files.delete(ctx, s, id, "id = ?", id)
}

// FileExpired lists files expired at t.
func (s *Store) FileExpired(ctx context.Context, t time.Time, limit int) ([]store.File, error) {
	return files.rows(ctx, s, "list expired files", files.sel+` WHERE f.expires_at IS NOT NULL AND f.expires_at <= ?
		ORDER BY f.expires_at, f.id LIMIT ?`, micros(t), limitArg(limit))
}

func scanFile(row scanner) (*store.File, error) {
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
