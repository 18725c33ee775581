package store

import (
	"context"
	"time"

	"github.com/corralhq/corral/internal/apitype"
)

// WorkspaceStore keeps the workspaces and which workspace each resource belongs to.
//
// Every store has the default workspace (apitype.DefaultWorkspaceID) from its first migration. A resource's
// workspace is recorded by Own under the resource's id before the resource is written, so a resource is never
// in the store without its owner; a resource whose id has no owner recorded (one written before workspaces
// existed) belongs to the default workspace. ListParams.Workspace lists one workspace's resources.
type WorkspaceStore interface {
	// WorkspaceCreate stores a new workspace; ErrConflict if the id exists.
	WorkspaceCreate(ctx context.Context, w *apitype.Workspace) error
	// WorkspaceGet returns a workspace, archived or not; ErrNotFound if there is none.
	WorkspaceGet(ctx context.Context, id string) (*apitype.Workspace, error)
	// WorkspaceUpdate reads the workspace, applies fn and writes the result, atomically (the Update rule;
	// KeepWorkspace).
	WorkspaceUpdate(ctx context.Context, id string, fn func(*apitype.Workspace) error) (*apitype.Workspace, error)
	// WorkspaceList lists workspaces by (created_at, id) with p's filters (IncludeArchived).
	WorkspaceList(ctx context.Context, p *ListParams) ([]apitype.Workspace, error)
	Owners
}

// Owners records which workspace each resource belongs to.
type Owners interface {
	// Own records that the resource id belongs to workspace ws; ErrConflict if id has an owner already.
	Own(ctx context.Context, id, ws string) error
	// OwnerOf returns the workspace of the resource id: DefaultWorkspaceID if none was recorded.
	OwnerOf(ctx context.Context, id string) (string, error)
}

// KeepWorkspace is what WorkspaceUpdate keeps of the workspace read: its id, its creation and its archival (an
// archived workspace stays archived).
func KeepWorkspace(next, cur *apitype.Workspace) {
	next.Type, next.ID, next.CreatedAt = apitype.ObjectWorkspace, cur.ID, cur.CreatedAt
	if cur.ArchivedAt != nil {
		next.ArchivedAt = cur.ArchivedAt
	}
}

// NewWorkspace is a workspace as WorkspaceCreate takes it, created at now.
func NewWorkspace(id, name string, now time.Time) *apitype.Workspace {
	return &apitype.Workspace{Type: apitype.ObjectWorkspace, ID: id, Name: name, Tags: map[string]string{},
		CreatedAt: now, DataResidency: apitype.DataResidency{AllowedInferenceGeos: "unrestricted",
			DefaultInferenceGeo: "global", WorkspaceGeo: "us"}}
}

// DefaultWorkspace is the default workspace as a store's first start writes it.
func DefaultWorkspace(now time.Time) *apitype.Workspace {
	return NewWorkspace(apitype.DefaultWorkspaceID, "Default Workspace", now)
}
