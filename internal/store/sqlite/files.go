package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// FileCreate stores a new file's metadata.
func (s *Store) FileCreate(ctx context.Context, f *store.File) error {
	doc, err := json.Marshal(&f.File)
	if err != nil {
		return fmt.Errorf("sqlite: create file %s: %w", f.ID, err)
	}
	scope := ""
	if f.Scope != nil {
		scope = f.Scope.ID
	}
	err = s.write(ctx, func(w *wtx) error {
		_, err := w.exec(`INSERT INTO files (id, created_at, scope_id, sha256, blob_key, expires_at, doc) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			f.ID, micros(f.CreatedAt), scope, f.SHA256, f.BlobKey, nullMicros(f.ExpiresAt), doc)
		return err
	}, nil)
	return writeErr(err, "create file %s", f.ID)
}

// FileGet returns a file's metadata.
func (s *Store) FileGet(ctx context.Context, id string) (*store.File, error) {
	return getOne(ctx, s, "file "+id, scanFile, `SELECT sha256, blob_key, doc FROM files WHERE id = ?`, id)
}

// FileList lists files.
func (s *Store) FileList(ctx context.Context, p *store.FileListParams) ([]store.File, error) {
	var f filter
	if p.ScopeID != "" {
		f.add("f.scope_id = ?", p.ScopeID)
	}
	if len(p.IDs) > 0 {
		args := make([]any, len(p.IDs))
		for i, id := range p.IDs {
			args[i] = id
		}
		f.add("f.id IN ("+placeholders(len(args))+")", args...)
	}
	lp := p.ListParams
	lp.IncludeArchived = true // files have no archived_at
	tail := f.addList("f", &lp)
	rows, err := s.readQuery(ctx, `SELECT f.sha256, f.blob_key, f.doc FROM files f`+f.where()+tail,
		append(f.args, limitArg(p.Limit))...)
	if err != nil {
		return nil, s.readErr("list files", err)
	}
	out, err := collect(rows, scanFile)
	if err != nil {
		return nil, s.readErr("list files", err)
	}
	return out, nil
}

// FileDelete removes a file's metadata.
func (s *Store) FileDelete(ctx context.Context, id string) error {
	err := s.write(ctx, func(w *wtx) error {
		n, err := w.execN(`DELETE FROM files WHERE id = ?`, id)
		if err == nil && n == 0 {
			err = store.ErrNotFound
		}
		return err
	}, nil)
	if err != nil {
		return fmt.Errorf("sqlite: delete file %s: %w", id, err)
	}
	return nil
}

// FileExpired lists files expired at t.
func (s *Store) FileExpired(ctx context.Context, t time.Time, limit int) ([]store.File, error) {
	rows, err := s.readQuery(ctx, `SELECT sha256, blob_key, doc FROM files WHERE expires_at IS NOT NULL AND expires_at <= ?
		ORDER BY expires_at, id LIMIT ?`, micros(t), limitArg(limit))
	if err != nil {
		return nil, s.readErr("list expired files", err)
	}
	out, err := collect(rows, scanFile)
	if err != nil {
		return nil, s.readErr("list expired files", err)
	}
	return out, nil
}

func scanFile(row scanner) (*store.File, error) {
	var (
		f   store.File
		doc []byte
	)
	if err := row.Scan(&f.SHA256, &f.BlobKey, &doc); err != nil {
		return nil, err
	}
	var meta apitype.File
	if err := json.Unmarshal(doc, &meta); err != nil {
		return nil, fmt.Errorf("decode file: %w", err)
	}
	f.File = meta
	return &f, nil
}
