package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

var workspaces = &table[apitype.Workspace]{
	what: "workspace", name: "workspaces", alias: "w", archivable: true,
	sel:  `SELECT w.doc, w.archived_at FROM workspaces w`,
	scan: scanDoc("workspace", func(w *apitype.Workspace, at *time.Time) { w.ArchivedAt = at }),
	put: func(w *wtx, next, _ *apitype.Workspace) error {
		return putDoc(w, "workspaces", next.ID, next.ArchivedAt, next)
	},
}

// ensureDefaultWorkspace writes the default workspace unless it is there.
func ensureDefaultWorkspace(ctx context.Context, db *sql.DB) error {
	d := store.DefaultWorkspace(apitype.Now())
	doc, err := json.Marshal(d)
	if err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, `INSERT OR IGNORE INTO workspaces (id, created_at, archived_at, doc) VALUES (?, ?, NULL, ?)`,
		d.ID, micros(d.CreatedAt), doc)
	return err
}

// WorkspaceCreate stores a new workspace.
func (s *Store) WorkspaceCreate(ctx context.Context, ws *apitype.Workspace) error {
	doc, err := json.Marshal(ws)
	if err != nil {
		return writeErr(err, "create workspace %s", ws.ID)
	}
	return workspaces.create(ctx, s, ws.ID, `INSERT INTO workspaces (id, created_at, archived_at, doc) VALUES (?, ?, ?, ?)`,
		ws.ID, micros(ws.CreatedAt), nullMicros(ws.ArchivedAt), doc)
}

// WorkspaceGet returns a workspace.
func (s *Store) WorkspaceGet(ctx context.Context, id string) (*apitype.Workspace, error) {
	return workspaces.get(ctx, s, id, "w.id = ?", id)
}

// WorkspaceUpdate applies fn to the workspace and stores the result, atomically.
func (s *Store) WorkspaceUpdate(ctx context.Context, id string, fn func(*apitype.Workspace) error) (*apitype.Workspace, error) {
	return workspaces.update(ctx, s, id, fn, store.KeepWorkspace)
}

// WorkspaceList lists workspaces.
func (s *Store) WorkspaceList(ctx context.Context, p *store.ListParams) ([]apitype.Workspace, error) {
	lp := *p
	lp.Workspace = "" // workspaces belong to no workspace
	return workspaces.list(ctx, s, &filter{}, &lp)
}

// Own records a resource's workspace.
func (s *Store) Own(ctx context.Context, id, ws string) error {
	err := s.write(ctx, func(w *wtx) error {
		_, err := w.exec(`INSERT INTO owners (id, workspace_id) VALUES (?, ?)`, id, ws)
		return err
	}, nil)
	return writeErr(err, "own %s", id)
}

// OwnerOf returns a resource's workspace, the default one if none was recorded.
func (s *Store) OwnerOf(ctx context.Context, id string) (string, error) {
	var ws string
	err := s.readRow(ctx, `SELECT workspace_id FROM owners WHERE id = ?`, id).Scan(&ws)
	if errors.Is(err, sql.ErrNoRows) {
		return apitype.DefaultWorkspaceID, nil
	}
	if err != nil {
		return "", s.readErr("owner of "+id, err)
	}
	return ws, nil
}

// ownedBy is the condition that the resource whose id is in column col belongs to the workspace of the
// argument that follows it.
func ownedBy(col string) string {
	return `coalesce((SELECT o.workspace_id FROM owners o WHERE o.id = ` + col + `), '` + apitype.DefaultWorkspaceID + `') = ?`
}
