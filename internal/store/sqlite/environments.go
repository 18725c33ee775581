package sqlite

import (
	"context"
	"encoding/json"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

var environments = &table[apitype.Environment]{
	what: "environment", name: "environments", alias: "e", archivable: true,
	sel:  `SELECT e.doc FROM environments e`,
	scan: scanDoc[apitype.Environment]("environment", nil),
	put: func(w *wtx, e, cur *apitype.Environment) error {
		doc, err := json.Marshal(e)
		if err != nil {
			return err
		}
		// The name column changes only with the name: an environment that shares a name it had before the
		// names became unique keeps it.
		_, err = w.exec(`UPDATE environments SET archived_at = ?1, doc = ?2,
			name = CASE WHEN ?3 THEN `+workspaceName+` ELSE name END WHERE id = ?5`,
			nullMicros(e.ArchivedAt), doc, e.Name != cur.Name, e.Name, e.ID)
		return err
	},
}

// EnvironmentCreate stores a new environment; ErrConflict if the id, or the name of an environment that is not
// archived, exists.
func (s *Store) EnvironmentCreate(ctx context.Context, e *apitype.Environment) error {
	doc, err := json.Marshal(e)
	if err != nil {
		return writeErr(err, "create environment %s", e.ID)
	}
	return environments.create(ctx, s, e.ID, `INSERT INTO environments (id, created_at, archived_at, name, doc)
		VALUES (?5, ?1, ?2, `+workspaceName+`, ?3)`, micros(e.CreatedAt), nullMicros(e.ArchivedAt), doc, e.Name, e.ID)
}

// workspaceName is the name column of the environment whose id is ?5 and name ?4: unique within its workspace,
// so the name is its workspace's id (recorded with store.Owners before the environment is written), a slash
// and the name.
const workspaceName = `coalesce((SELECT o.workspace_id FROM owners o WHERE o.id = ?5), '` + apitype.DefaultWorkspaceID + `') || '/' || ?4`

// EnvironmentGet returns an environment.
func (s *Store) EnvironmentGet(ctx context.Context, id string) (*apitype.Environment, error) {
	return environments.get(ctx, s, id, "e.id = ?", id)
}

// EnvironmentUpdate applies fn to the environment and stores the result, atomically.
func (s *Store) EnvironmentUpdate(ctx context.Context, id string,
	fn func(*apitype.Environment) error) (*apitype.Environment, error) {
	return environments.update(ctx, s, id, fn, store.KeepEnvironment)
}

// EnvironmentList lists environments.
func (s *Store) EnvironmentList(ctx context.Context, p *store.ListParams) ([]apitype.Environment, error) {
	return environments.list(ctx, s, &filter{}, p)
}

// EnvironmentDelete removes an environment.
func (s *Store) EnvironmentDelete(ctx context.Context, id string) error {
	return environments.delete(ctx, s, id, "id = ?", id)
}

// EnvironmentImageSet records the environment's image status under store.SetImage's rule.
func (s *Store) EnvironmentImageSet(ctx context.Context, id string, img *apitype.EnvironmentImage) error {
	_, err := s.EnvironmentUpdate(ctx, id, func(e *apitype.Environment) error { return store.SetImage(e, img) })
	return err
}
