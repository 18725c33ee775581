package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// Workspaces keep teams apart on one server. Every resource belongs to one workspace, recorded under its id in
// the store's owners (store.WorkspaceStore) before it is written; a request acts in one workspace, and sees
// and changes that workspace's resources only:
//
//   - the workspace of a request is decided when it is authenticated (enterWorkspace): a workspace API key's,
//     the one an organization admin key's request names in anthropic-workspace-id (the default workspace if
//     none), the environment key's environment's, the sessions token's session's. An archived workspace's keys
//     and tokens are refused at once (401), a request of a workspace key naming another workspace too (403).
//   - the resources a request's path names are the workspace's or a 404, exactly as if there were none
//     (checkPathOwners); their children (credentials, memories, threads, work items) are reached through them.
//   - the resources a request's body names (a session's agent, environment, vaults, files and memory stores, an
//     agent's skills and roster, ...) are read through guardedStore, whose reads of another workspace's
//     resource find nothing: the handler answers as it does for a resource that does not exist.
//   - lists are of the workspace's resources (inWorkspace sets store.ListParams.Workspace).
//   - what a request creates is the workspace's (own); what the server creates on a resource's behalf
//     (a deployment's sessions, a dream's outputs) is the resource's workspace's (withWorkspace).
//
// The sandboxes, workers and proxies keep the boundary through the resources: a session can name only its
// workspace's environment, vaults and memory stores, so the credentials its proxies inject and the workers that
// take its work are its workspace's; a tunnel carries only the MCP traffic of its workspace's sessions
// (tunnel.Hub.Resolve).

// workspaceHeader names the workspace a request acts in (the SDKs' WithWorkspaceID option sends it).
const workspaceHeader = "anthropic-workspace-id"

// workspaceKey is the context key of the workspace of work the server does on a resource's behalf.
type workspaceKey struct{}

// withWorkspace is ctx acting in workspace ws, for work that no request carries (a deployment's runs).
func withWorkspace(ctx context.Context, ws string) context.Context {
	return context.WithValue(ctx, workspaceKey{}, ws)
}

// ctxWorkspace is the workspace ctx acts in: withWorkspace's, or else its caller's; "" if neither (the server's
// own work, which is not confined to a workspace).
func ctxWorkspace(ctx context.Context) string {
	if ws, ok := ctx.Value(workspaceKey{}).(string); ok {
		return ws
	}
	if c := callerOf(ctx); c != nil {
		return c.ws
	}
	return ""
}

// workspaceOf is the workspace of the request.
func workspaceOf(r *http.Request) string { return ctxWorkspace(r.Context()) }

// inWorkspace sets p to list the request's workspace's resources only, and returns it.
func inWorkspace(r *http.Request, p *store.ListParams) *store.ListParams {
	p.Workspace = workspaceOf(r)
	return p
}

// own records that the resource id, about to be created, belongs to ctx's workspace.
func (s *Server) own(ctx context.Context, id string) error {
	ws := ctxWorkspace(ctx)
	if ws == "" {
		return errors.New("api: a resource created outside any workspace")
	}
	err := s.store.Own(ctx, id, ws)
	if errors.Is(err, store.ErrConflict) {
		// Recorded before: by the same work redone after a crash (a run's session, a dream's output), or not.
		owner, oerr := s.store.OwnerOf(ctx, id)
		if oerr != nil {
			return oerr
		}
		if owner != ws {
			return fmt.Errorf("api: %s belongs to workspace %s, not %s", id, owner, ws)
		}
		err = nil
	}
	if err != nil {
		return err
	}
	s.owners.put(id, ws)
	return nil
}

// ownerOf is the workspace of the resource id (the default one if none is recorded).
func (s *Server) ownerOf(ctx context.Context, id string) (string, error) {
	if ws, ok := s.owners.get(id); ok {
		return ws, nil
	}
	ws, err := s.store.OwnerOf(ctx, id)
	if err != nil {
		return "", err
	}
	// A recorded owner never changes. "None recorded" (the default workspace) is recorded later only for an id
	// nobody had when it was read: ids are random (NewID), or derived from random ids that only their own
	// workspace sees (a run's session), so no request can read an id before it is created, but by guessing it.
	s.owners.put(id, ws)
	return ws, nil
}

// inWorkspaceOf is ctx acting in the workspace of the resource id (the server's work on its behalf: a
// deployment's runs), and whether that workspace is open (not archived).
func (s *Server) inWorkspaceOf(ctx context.Context, id string) (context.Context, bool, error) {
	ws, err := s.ownerOf(ctx, id)
	if err != nil {
		return ctx, false, err
	}
	if ws == apitype.DefaultWorkspaceID {
		return withWorkspace(ctx, ws), true, nil
	}
	w, err := s.store.WorkspaceGet(ctx, ws)
	if err != nil {
		return ctx, false, err
	}
	return withWorkspace(ctx, ws), w.ArchivedAt == nil, nil
}

// inOwnersWorkspace puts c in the workspace of the resource id (an environment key's environment, a sessions
// token's session).
func (s *Server) inOwnersWorkspace(ctx context.Context, c *caller, id string) (*caller, error) {
	ws, err := s.ownerOf(ctx, id)
	if err != nil {
		return nil, err
	}
	c.ws = ws
	return c, nil
}

// enterWorkspace decides the workspace of a request of caller c to a route of access a, and checks that c may
// act there and that the resources the path names are there.
func (s *Server) enterWorkspace(r *http.Request, a access, c *caller) error {
	named := r.Header.Get(workspaceHeader)
	if named == "default" { // the SDKs' name of the organization's default workspace
		named = apitype.DefaultWorkspaceID
	}
	if a.admin {
		if !c.admin {
			return errForbidden("the admin API takes an organization admin key, not a workspace's key")
		}
		c.ws = apitype.DefaultWorkspaceID // the admin API's resources are the organization's
		return nil
	}
	switch {
	case c.admin:
		c.ws = cmp.Or(named, apitype.DefaultWorkspaceID)
	case named != "" && named != c.ws:
		return errForbidden("this credential belongs to workspace %s, not to %s", c.ws, named)
	}
	if err := s.checkWorkspaceOpen(r.Context(), c); err != nil {
		return err
	}
	return s.checkPathOwners(r, c)
}

// checkWorkspaceOpen refuses a request in a workspace that does not exist or is archived: an archived
// workspace's keys and tokens stop working at once.
func (s *Server) checkWorkspaceOpen(ctx context.Context, c *caller) error {
	if c.ws == apitype.DefaultWorkspaceID {
		return nil // it always exists, and is never archived
	}
	w, err := s.store.WorkspaceGet(ctx, c.ws)
	switch {
	case errors.Is(err, store.ErrNotFound) && c.admin:
		return notFound("workspace", c.ws)
	case errors.Is(err, store.ErrNotFound):
		return errUnauthorized("this credential's workspace does not exist")
	case err != nil:
		return err
	case w.ArchivedAt != nil && c.admin:
		return errForbidden("workspace %s is archived", c.ws)
	case w.ArchivedAt != nil:
		return errUnauthorized("this credential's workspace is archived")
	}
	return nil
}

// ownedPathValues are the path values that name a resource of a workspace, with the resource's kind. A
// deployment run is its deployment's workspace's: the handler's read (guardedStore) checks it.
var ownedPathValues = []struct{ name, kind string }{
	{"agent_id", "agent"}, {"environment_id", "environment"}, {"session_id", "session"}, {"vault_id", "vault"},
	{"memory_store_id", "memory store"}, {"dream_id", "dream"}, {"deployment_id", "deployment"},
	{"webhook_endpoint_id", "webhook endpoint"}, {"tunnel_id", "tunnel"}, {"file_id", "file"}, {"skill_id", "skill"},
}

// checkPathOwners answers 404, as for a resource that does not exist, when the request's path names another
// workspace's resource.
func (s *Server) checkPathOwners(r *http.Request, c *caller) error {
	for _, v := range ownedPathValues {
		id := r.PathValue(v.name)
		if id == "" {
			continue
		}
		ws, err := s.ownerOf(r.Context(), id)
		if err != nil {
			return err
		}
		if ws != c.ws {
			return notFound(v.kind, id)
		}
	}
	return nil
}

// guardedStore is the API's store: a read of a resource of a workspace other than its context's finds nothing
// (store.ErrNotFound), so a request never reaches, through its body's references, what its path could not.
// Without a workspace in the context (the server's own work) it reads everything.
type guardedStore struct {
	store.Store
	s *Server
}

// Unreachable passes the wrapped store's store.Reachability through.
func (g *guardedStore) Unreachable(err error) bool { return store.IsUnavailable(g.Store, err) }

// guard returns v, or store.ErrNotFound if the resource id is not ctx's workspace's.
func guard[T any](ctx context.Context, g *guardedStore, id string, v T, err error) (T, error) {
	var zero T
	if err != nil {
		return zero, err
	}
	ws := ctxWorkspace(ctx)
	if ws == "" {
		return v, nil
	}
	owner, err := g.s.ownerOf(ctx, id)
	if err != nil {
		return zero, err
	}
	if owner != ws {
		return zero, store.ErrNotFound
	}
	return v, nil
}

func (g *guardedStore) AgentGet(ctx context.Context, p *store.AgentGetParams) (*apitype.Agent, error) {
	v, err := g.Store.AgentGet(ctx, p)
	return guard(ctx, g, p.ID, v, err)
}

func (g *guardedStore) EnvironmentGet(ctx context.Context, id string) (*apitype.Environment, error) {
	v, err := g.Store.EnvironmentGet(ctx, id)
	return guard(ctx, g, id, v, err)
}

func (g *guardedStore) SessionGet(ctx context.Context, id string) (*apitype.Session, error) {
	v, err := g.Store.SessionGet(ctx, id)
	return guard(ctx, g, id, v, err)
}

func (g *guardedStore) SessionState(ctx context.Context, id string) (*store.SessionState, error) {
	v, err := g.Store.SessionState(ctx, id)
	return guard(ctx, g, id, v, err)
}

func (g *guardedStore) VaultGet(ctx context.Context, id string) (*apitype.Vault, error) {
	v, err := g.Store.VaultGet(ctx, id)
	return guard(ctx, g, id, v, err)
}

func (g *guardedStore) FileGet(ctx context.Context, id string) (*store.File, error) {
	v, err := g.Store.FileGet(ctx, id)
	return guard(ctx, g, id, v, err)
}

func (g *guardedStore) MemoryStoreGet(ctx context.Context, id string) (*apitype.MemoryStore, error) {
	v, err := g.Store.MemoryStoreGet(ctx, id)
	return guard(ctx, g, id, v, err)
}

func (g *guardedStore) SkillGet(ctx context.Context, id string) (*apitype.Skill, error) {
	v, err := g.Store.SkillGet(ctx, id)
	return guard(ctx, g, id, v, err)
}

func (g *guardedStore) SkillVersionGet(ctx context.Context, skillID, version string) (*store.SkillVersion, error) {
	v, err := g.Store.SkillVersionGet(ctx, skillID, version)
	return guard(ctx, g, skillID, v, err)
}

func (g *guardedStore) DeploymentGet(ctx context.Context, id string) (*store.DeploymentRecord, error) {
	v, err := g.Store.DeploymentGet(ctx, id)
	return guard(ctx, g, id, v, err)
}

func (g *guardedStore) DeploymentRunGet(ctx context.Context, id string) (*apitype.DeploymentRun, error) {
	v, err := g.Store.DeploymentRunGet(ctx, id)
	if err != nil {
		return nil, err
	}
	return guard(ctx, g, v.DeploymentID, v, nil) // a run is its deployment's workspace's
}

func (g *guardedStore) DreamGet(ctx context.Context, id string) (*apitype.Dream, error) {
	v, err := g.Store.DreamGet(ctx, id)
	return guard(ctx, g, id, v, err)
}

func (g *guardedStore) TunnelGet(ctx context.Context, id string) (*store.TunnelRecord, error) {
	v, err := g.Store.TunnelGet(ctx, id)
	return guard(ctx, g, id, v, err)
}

func (g *guardedStore) WebhookEndpointGet(ctx context.Context, id string) (*store.WebhookEndpointRecord, error) {
	v, err := g.Store.WebhookEndpointGet(ctx, id)
	return guard(ctx, g, id, v, err)
}
