package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

var workspaces = &table[apitype.Workspace]{
	what: "workspace", name: "workspaces", alias: "w", archivable: true,
	sel:  `SELECT w.doc, w.archived_at FROM workspaces w`,
	scan: scanDoc("workspace", func(w *apitype.Workspace, at *time.Time) { w.ArchivedAt = at }),
	put: func(ctx context.Context, tx pgx.Tx, next, _ *apitype.Workspace) error {
		return putDoc(ctx, tx, "workspaces", next.ID, next.ArchivedAt, next)
	},
}

// ensureDefaultWorkspace writes the default workspace unless it is there.
func (s *Store) ensureDefaultWorkspace(ctx context.Context) error {
	d := store.DefaultWorkspace(apitype.Now())
	doc, err := json.Marshal(d)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO workspaces (id, created_at, archived_at, doc) VALUES ($1, $2, NULL, $3)
		ON CONFLICT (id) DO NOTHING`, d.ID, d.CreatedAt, doc)
	if err != nil {
		return fmt.Errorf("postgres: the default workspace: %w", err)
	}
	return nil
}

// WorkspaceCreate stores a new workspace.
func (s *Store) WorkspaceCreate(ctx context.Context, ws *apitype.Workspace) error {
	doc, err := json.Marshal(ws)
	if err != nil {
		return fmt.Errorf("workspace create: encode: %w", err)
	}
	return workspaces.create(ctx, s, `INSERT INTO workspaces (id, created_at, archived_at, doc) VALUES ($1, $2, $3, $4)`,
		ws.ID, ws.CreatedAt, ws.ArchivedAt, doc)
}

// WorkspaceGet returns a workspace.
func (s *Store) WorkspaceGet(ctx context.Context, id string) (*apitype.Workspace, error) {
	return workspaces.get(ctx, s, "w.id = $1", id)
}

// WorkspaceUpdate applies fn to the workspace and stores the result, atomically.
func (s *Store) WorkspaceUpdate(ctx context.Context, id string, fn func(*apitype.Workspace) error) (*apitype.Workspace, error) {
	return workspaces.update(ctx, s, id, fn, store.KeepWorkspace)
}

// WorkspaceList lists workspaces.
func (s *Store) WorkspaceList(ctx context.Context, p *store.ListParams) ([]apitype.Workspace, error) {
	lp := *p
	lp.Workspace = "" // workspaces belong to no workspace
	return workspaces.list(ctx, s, workspaces.query(), &lp)
}

// Own records a resource's workspace.
func (s *Store) Own(ctx context.Context, id, ws string) error {
	if err := s.check(); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO owners (id, workspace_id) VALUES ($1, $2)`, id, ws)
	return s.dbErr("own "+id, err)
}

// OwnerOf returns a resource's workspace, the default one if none was recorded.
func (s *Store) OwnerOf(ctx context.Context, id string) (string, error) {
	if err := s.check(); err != nil {
		return "", err
	}
	var ws string
	err := s.pool.QueryRow(ctx, `SELECT workspace_id FROM owners WHERE id = $1`, id).Scan(&ws)
	if errors.Is(err, pgx.ErrNoRows) {
		return apitype.DefaultWorkspaceID, nil
	}
	if err != nil {
		return "", s.dbErr("owner of "+id, err)
	}
	return ws, nil
}

// ownedBy is the condition that the resource whose id is in column col belongs to the workspace of placeholder
// arg.
func ownedBy(col, arg string) string {
	return `coalesce((SELECT o.workspace_id FROM owners o WHERE o.id = ` + col + `), '` + apitype.DefaultWorkspaceID + `') = ` + arg
}
