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

func decodeEnvironment(doc []byte, archived *time.Time) (apitype.Environment, error) {
	var e apitype.Environment
	if err := json.Unmarshal(doc, &e); err != nil {
		return e, fmt.Errorf("decode environment: %w", err)
	}
	e.ArchivedAt = utc(archived)
	return e, nil
}

// EnvironmentCreate stores a new environment; ErrConflict if the id, or the name of an environment that is not
// archived, exists.
func (s *Store) EnvironmentCreate(ctx context.Context, e *apitype.Environment) error {
	if err := s.check(); err != nil {
		return err
	}
	doc, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("environment create: encode: %w", err)
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO environments (id, created_at, archived_at, name, doc) VALUES ($1, $2, $3, $4, $5)`,
		e.ID, e.CreatedAt, e.ArchivedAt, e.Name, doc)
	return s.dbErr("environment create", err)
}

// EnvironmentGet returns an environment.
func (s *Store) EnvironmentGet(ctx context.Context, id string) (*apitype.Environment, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var (
		doc      []byte
		archived *time.Time
	)
	err := s.pool.QueryRow(ctx, `SELECT doc, archived_at FROM environments WHERE id = $1`, id).Scan(&doc, &archived)
	if err != nil {
		return nil, s.dbErr("environment get", err)
	}
	e, err := decodeEnvironment(doc, archived)
	if err != nil {
		return nil, err
	}
	return &e, nil
}

// EnvironmentUpdate applies fn to the environment under a row lock and stores the result.
func (s *Store) EnvironmentUpdate(ctx context.Context, id string,
	fn func(*apitype.Environment) error) (*apitype.Environment, error) {
	var out apitype.Environment
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var (
			doc      []byte
			archived *time.Time
		)
		err := tx.QueryRow(ctx, `SELECT doc, archived_at FROM environments WHERE id = $1 FOR NO KEY UPDATE`, id).
			Scan(&doc, &archived)
		if err != nil {
			return err
		}
		e, err := decodeEnvironment(doc, archived)
		if err != nil {
			return err
		}
		name := e.Name
		if err := fn(&e); err != nil {
			return err
		}
		e.ID = id
		if doc, err = json.Marshal(&e); err != nil {
			return fmt.Errorf("encode: %w", err)
		}
		// The name column changes only with the name: an environment that shares a name it had before the
		// names became unique keeps it.
		if _, err := tx.Exec(ctx, `UPDATE environments SET doc = $2, archived_at = $3,
			name = CASE WHEN $4 THEN $5 ELSE name END WHERE id = $1`,
			id, doc, e.ArchivedAt, e.Name != name, e.Name); err != nil {
			return err
		}
		out = e
		return nil
	})
	if err != nil {
		return nil, s.dbErr("environment update", err)
	}
	return &out, nil
}

// EnvironmentList lists environments.
func (s *Store) EnvironmentList(ctx context.Context, p *store.ListParams) ([]apitype.Environment, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var q query
	q.sql.WriteString(`SELECT e.doc, e.archived_at FROM environments e WHERE true`)
	q.listFilter(p, "e", true)
	out, err := collectDocs(ctx, s, &q, decodeEnvironment)
	return out, s.dbErr("environment list", err)
}

// EnvironmentDelete removes an environment.
func (s *Store) EnvironmentDelete(ctx context.Context, id string) error {
	if err := s.check(); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM environments WHERE id = $1`, id)
	if err == nil && tag.RowsAffected() == 0 {
		err = store.ErrNotFound
	}
	return s.dbErr("environment delete", err)
}

// EnvironmentImageSet records the environment's image status under store.SetImage's rule.
func (s *Store) EnvironmentImageSet(ctx context.Context, id string, img *apitype.EnvironmentImage) error {
	_, err := s.EnvironmentUpdate(ctx, id, func(e *apitype.Environment) error { return store.SetImage(e, img) })
	return err
}
