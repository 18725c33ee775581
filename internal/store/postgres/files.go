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

// FileCreate stores a new file's metadata; ErrConflict if the id exists.
func (s *Store) FileCreate(ctx context.Context, f *store.File) error {
	if err := s.check(); err != nil {
		return err
	}
	doc, err := json.Marshal(&f.File)
	if err != nil {
		return fmt.Errorf("file create: encode: %w", err)
	}
	scope := ""
	if f.Scope != nil {
		scope = f.Scope.ID
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO files (id, created_at, scope_id, sha256, blob_key, expires_at, doc) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		f.ID, f.CreatedAt, scope, f.SHA256, f.BlobKey, f.ExpiresAt, doc)
	return s.dbErr("file create", err)
}

// FileGet returns a file's metadata.
func (s *Store) FileGet(ctx context.Context, id string) (*store.File, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var (
		f   store.File
		doc []byte
	)
	if err := s.pool.QueryRow(ctx, `SELECT sha256, blob_key, doc FROM files WHERE id = $1`, id).
		Scan(&f.SHA256, &f.BlobKey, &doc); err != nil {
		return nil, s.dbErr("file get", err)
	}
	if err := json.Unmarshal(doc, &f.File); err != nil {
		return nil, fmt.Errorf("file get: decode: %w", err)
	}
	return &f, nil
}

// FileList lists files.
func (s *Store) FileList(ctx context.Context, p *store.FileListParams) ([]store.File, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var q query
	q.sql.WriteString(`SELECT f.sha256, f.blob_key, f.doc FROM files f WHERE true`)
	if p.ScopeID != "" {
		fmt.Fprintf(&q.sql, " AND f.scope_id = %s", q.arg(p.ScopeID))
	}
	if len(p.IDs) > 0 {
		fmt.Fprintf(&q.sql, " AND f.id = ANY(%s)", q.arg(p.IDs))
	}
	q.listFilter(&p.ListParams, "f", false)
	return s.collectFiles(ctx, "file list", &q)
}

// FileExpired lists files expired at t.
func (s *Store) FileExpired(ctx context.Context, t time.Time, limit int) ([]store.File, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var q query
	fmt.Fprintf(&q.sql, `SELECT sha256, blob_key, doc FROM files WHERE expires_at IS NOT NULL AND expires_at <= %s
		ORDER BY expires_at, id LIMIT %s`, q.arg(t), q.arg(max(limit, 1)))
	return s.collectFiles(ctx, "file expired", &q)
}

func (s *Store) collectFiles(ctx context.Context, op string, q *query) ([]store.File, error) {
	rows, err := s.pool.Query(ctx, q.sql.String(), q.args...)
	if err != nil {
		return nil, s.dbErr(op, err)
	}
	var (
		f   store.File
		doc []byte
	)
	out := []store.File{}
	_, err = pgx.ForEachRow(rows, []any{&f.SHA256, &f.BlobKey, &doc}, func() error {
		var meta apitype.File
		if err := json.Unmarshal(doc, &meta); err != nil {
			return fmt.Errorf("decode file: %w", err)
		}
		out = append(out, store.File{File: meta, SHA256: f.SHA256, BlobKey: f.BlobKey})
		return nil
	})
	if err != nil {
		return nil, s.dbErr(op, err)
	}
	return out, nil
}

// FileDelete removes a file's metadata.
func (s *Store) FileDelete(ctx context.Context, id string) error {
	if err := s.check(); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM files WHERE id = $1`, id)
	if err != nil {
		return s.dbErr("file delete", err)
	}
	if tag.RowsAffected() == 0 {
		return s.dbErr("file delete", store.ErrNotFound)
	}
	return nil
}
