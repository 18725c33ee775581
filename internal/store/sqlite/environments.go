package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// EnvironmentCreate stores a new environment; ErrConflict if the id, or the name of an environment that is not
// archived, exists.
func (s *Store) EnvironmentCreate(ctx context.Context, e *apitype.Environment) error {
	doc, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("sqlite: create environment %s: %w", e.ID, err)
	}
	err = s.write(ctx, func(w *wtx) error {
		_, err := w.exec(`INSERT INTO environments (id, created_at, archived_at, name, doc) VALUES (?, ?, ?, ?, ?)`,
			e.ID, micros(e.CreatedAt), nullMicros(e.ArchivedAt), e.Name, doc)
		return err
	}, nil)
	return writeErr(err, "create environment %s", e.ID)
}

// EnvironmentGet returns an environment.
func (s *Store) EnvironmentGet(ctx context.Context, id string) (*apitype.Environment, error) {
	return getOne(ctx, s, "environment "+id, scanEnvironment, `SELECT doc FROM environments WHERE id = ?`, id)
}

// EnvironmentUpdate applies fn to the environment and stores the result, atomically.
func (s *Store) EnvironmentUpdate(ctx context.Context, id string,
	fn func(*apitype.Environment) error) (*apitype.Environment, error) {
	var e *apitype.Environment
	err := s.write(ctx, func(w *wtx) error {
		var err error
		e, err = scanEnvironment(w.queryRow(`SELECT doc FROM environments WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		name := e.Name
		if err := fn(e); err != nil {
			return err
		}
		e.ID = id
		doc, err := json.Marshal(e)
		if err != nil {
			return err
		}
		// The name column changes only with the name: an environment that shares a name it had before the
		// names became unique keeps it.
		_, err = w.exec(`UPDATE environments SET archived_at = ?, doc = ?,
			name = CASE WHEN ? THEN ? ELSE name END WHERE id = ?`,
			nullMicros(e.ArchivedAt), doc, e.Name != name, e.Name, id)
		return err
	}, nil)
	if err := writeErr(err, "update environment %s", id); err != nil {
		return nil, err
	}
	return e, nil
}

// EnvironmentList lists environments.
func (s *Store) EnvironmentList(ctx context.Context, p *store.ListParams) ([]apitype.Environment, error) {
	var f filter
	tail := f.addList("e", p)
	rows, err := s.readQuery(ctx, `SELECT e.doc FROM environments e`+f.where()+tail,
		append(f.args, limitArg(p.Limit))...)
	if err != nil {
		return nil, s.readErr("list environments", err)
	}
	out, err := collect(rows, scanEnvironment)
	if err != nil {
		return nil, s.readErr("list environments", err)
	}
	return out, nil
}

// EnvironmentDelete removes an environment.
func (s *Store) EnvironmentDelete(ctx context.Context, id string) error {
	err := s.write(ctx, func(w *wtx) error {
		n, err := w.execN(`DELETE FROM environments WHERE id = ?`, id)
		if err == nil && n == 0 {
			err = store.ErrNotFound
		}
		return err
	}, nil)
	if err != nil {
		return fmt.Errorf("sqlite: delete environment %s: %w", id, err)
	}
	return nil
}

var scanEnvironment = scanDoc[apitype.Environment]("environment")

// EnvironmentImageSet records the environment's image status under store.SetImage's rule.
func (s *Store) EnvironmentImageSet(ctx context.Context, id string, img *apitype.EnvironmentImage) error {
	_, err := s.EnvironmentUpdate(ctx, id, func(e *apitype.Environment) error { return store.SetImage(e, img) })
	return err
}
