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

var environments = &table[apitype.Environment]{
	what: "environment", name: "environments", alias: "e", archivable: true,
	sel:  `SELECT e.doc, e.archived_at FROM environments e`,
	scan: scanDoc("environment", func(e *apitype.Environment, at *time.Time) { e.ArchivedAt = at }),
	put: func(ctx context.Context, tx pgx.Tx, e, cur *apitype.Environment) error {
		doc, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("encode: %w", err)
		}
		// The name column changes only with the name: an environment that shares a name it had before the
		// names became unique keeps it.
		_, err = tx.Exec(ctx, `UPDATE environments SET doc = $2, archived_at = $3,
			name = CASE WHEN $4 THEN `+workspaceName+` ELSE name END WHERE id = $1`,
			e.ID, doc, e.ArchivedAt, e.Name != cur.Name, e.Name)
		return err
	},
}

// EnvironmentCreate stores a new environment; ErrConflict if the id, or the name of an environment that is not
// archived, exists.
func (s *Store) EnvironmentCreate(ctx context.Context, e *apitype.Environment) error {
	doc, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("environment create: encode: %w", err)
	}
	return environments.create(ctx, s, `INSERT INTO environments (id, created_at, archived_at, name, doc)
		VALUES ($1, $2, $3, `+workspaceName+`, $4)`, e.ID, e.CreatedAt, e.ArchivedAt, doc, e.Name)
}

// workspaceName is the name column of the environment whose id is $1 and name $5: unique within its workspace,
// so the name is its workspace's id (recorded with store.Owners before the environment is written), a slash
// and the name.
const workspaceName = `coalesce((SELECT o.workspace_id FROM owners o WHERE o.id = $1), '` + apitype.DefaultWorkspaceID + `') || '/' || $5::text`

// EnvironmentGet returns an environment.
func (s *Store) EnvironmentGet(ctx context.Context, id string) (*apitype.Environment, error) {
	return environments.get(ctx, s, "e.id = $1", id)
}

// EnvironmentUpdate applies fn to the environment under a row lock and stores the result.
func (s *Store) EnvironmentUpdate(ctx context.Context, id string,
	fn func(*apitype.Environment) error) (*apitype.Environment, error) {
	return environments.update(ctx, s, id, fn, store.KeepEnvironment)
}

// EnvironmentList lists environments.
func (s *Store) EnvironmentList(ctx context.Context, p *store.ListParams) ([]apitype.Environment, error) {
	return environments.list(ctx, s, environments.query(), p)
}

// EnvironmentDelete removes an environment.
func (s *Store) EnvironmentDelete(ctx context.Context, id string) error {
	return environments.delete(ctx, s, "id = $1", id)
}

// EnvironmentImageSet records the environment's image status under store.SetImage's rule.
func (s *Store) EnvironmentImageSet(ctx context.Context, id string, img *apitype.EnvironmentImage) error {
	_, err := s.EnvironmentUpdate(ctx, id, func(e *apitype.Environment) error { return store.SetImage(e, img) })
	return err
}
