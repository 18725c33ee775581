package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

// The admin API of the organization, an organization admin key's alone (accessAdmin): its workspaces
// (/v1/organizations/workspaces: create, get, update, list, archive) and its API keys
// (/v1/organizations/api_keys: get, update, list, and create, Corral's extension), as the official SDK's
// Admin client calls them.

const (
	maxWorkspaces        = 1000 // an organization's workspaces, archived ones included
	maxWorkspaceNameLen  = 40
	defaultAdminLimit    = 20
	maxAdminLimit        = 1000
	maxAPIKeyNameLen     = 256
	workspaceStopBatches = 100 // sessions and deployments stopped per read when a workspace is archived
)

var displayColor = regexp.MustCompile(`^#[0-9a-fA-F]{6}$`)

// idListPage is the Page of the admin API's lists: after_id, before_id and limit in, first_id and last_id out.
type idListPage[T any] struct {
	Data    []T     `json:"data"`
	HasMore bool    `json:"has_more"`
	FirstID *string `json:"first_id"`
	LastID  *string `json:"last_id"`
}

// writeIDPage writes the page of all that q asks for (idPage), all in the list's order.
func writeIDPage[T any](w http.ResponseWriter, q query, all []T, id func(*T) string) error {
	limit, err := q.limit(defaultAdminLimit, maxAdminLimit)
	if err != nil {
		return err
	}
	lo, hi, more, err := idPage(q, len(all), limit, func(want string) int {
		return slices.IndexFunc(all, func(v T) bool { return id(&v) == want })
	})
	if err != nil {
		return err
	}
	page := idListPage[T]{Data: append([]T{}, all[lo:hi]...), HasMore: more} // never null
	if n := len(page.Data); n > 0 {
		first, last := id(&page.Data[0]), id(&page.Data[n-1])
		page.FirstID, page.LastID = &first, &last
	}
	return writeJSON(w, http.StatusOK, page)
}

type workspaceRequest struct {
	Name          nullable[string]            `json:"name"`
	DisplayColor  nullable[string]            `json:"display_color"`
	Tags          nullable[map[string]string] `json:"tags"`
	DataResidency json.RawMessage             `json:"data_residency"`
	ExternalKeyID nullable[string]            `json:"external_key_id"`
	UserProfileID nullable[string]            `json:"user_profile_id"`
}

// apply checks the request and sets what it sets on w; create requires a name.
func (req *workspaceRequest) apply(w *apitype.Workspace, create bool) error {
	switch {
	case len(req.DataResidency) > 0 && string(req.DataResidency) != "null":
		return invalid("data_residency", "not supported: a self-hosted server keeps its workspaces' data where it runs")
	case req.ExternalKeyID.Set && !req.ExternalKeyID.Null:
		return invalid("external_key_id", "not supported: this server's vault key seals every workspace's secrets")
	case req.UserProfileID.Set && !req.UserProfileID.Null:
		return invalid("user_profile_id", "not supported on this server")
	case create && (!req.Name.Set || req.Name.Null):
		return invalid("name", "required")
	}
	if req.Name.Set {
		if req.Name.Null {
			return invalid("name", "must not be null")
		}
		if err := checkString("name", req.Name.Value, true, maxWorkspaceNameLen); err != nil {
			return err
		}
		w.Name = req.Name.Value
	}
	if req.DisplayColor.Set {
		c := req.DisplayColor.Value
		if c != "" && !displayColor.MatchString(c) {
			return invalid("display_color", "must be a color #RRGGBB")
		}
		w.DisplayColor = c
	}
	if req.Tags.Set {
		if err := validateMetadata("tags", req.Tags.Value); err != nil {
			return err
		}
		w.Tags = req.Tags.Value
		if w.Tags == nil {
			w.Tags = map[string]string{}
		}
	}
	return nil
}

func (s *Server) workspaceCreate(w http.ResponseWriter, r *http.Request) error {
	var req workspaceRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	ws := store.NewWorkspace(apitype.NewID(apitype.PrefixWorkspace), "", s.now())
	if err := req.apply(ws, true); err != nil {
		return err
	}
	all, err := s.store.WorkspaceList(r.Context(), &store.ListParams{Limit: maxWorkspaces + 1, IncludeArchived: true})
	if err != nil {
		return err
	}
	if len(all) > maxWorkspaces { // the default workspace is not counted
		return invalid("", "the organization has %d workspaces, the most it may have", maxWorkspaces)
	}
	if err := s.store.WorkspaceCreate(r.Context(), ws); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, ws)
}

func (s *Server) workspaceGet(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("workspace_id")
	ws, err := s.store.WorkspaceGet(r.Context(), id)
	if err != nil {
		return lookup(err, "workspace", id)
	}
	return writeJSON(w, http.StatusOK, ws)
}

func (s *Server) workspaceUpdate(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("workspace_id")
	var req workspaceRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	ws, err := s.store.WorkspaceUpdate(r.Context(), id, func(ws *apitype.Workspace) error {
		if ws.ArchivedAt != nil {
			return invalid("", "workspace %s is archived", id)
		}
		return req.apply(ws, false)
	})
	if err != nil {
		return lookup(err, "workspace", id)
	}
	return writeJSON(w, http.StatusOK, ws)
}

func (s *Server) workspaceList(w http.ResponseWriter, r *http.Request) error {
	q := newQuery(r.URL)
	archived, err := q.boolean("include_archived")
	if err != nil {
		return err
	}
	withDefault, err := q.boolean("include_default")
	if err != nil {
		return err
	}
	ids := q.list("ids")
	all, err := s.store.WorkspaceList(r.Context(), &store.ListParams{Limit: maxWorkspaces + 1, IncludeArchived: archived})
	if err != nil {
		return err
	}
	all = slices.DeleteFunc(all, func(ws apitype.Workspace) bool {
		return ws.ID == apitype.DefaultWorkspaceID && !withDefault || len(ids) > 0 && !slices.Contains(ids, ws.ID)
	})
	return writeIDPage(w, q, all, func(ws *apitype.Workspace) string { return ws.ID })
}

// workspaceArchive archives a workspace: its keys, environment keys and sessions tokens stop working at once
// (enterWorkspace), its running sessions are interrupted and its deployments archived, so that nothing of it
// runs on. Archiving again does the stopping again (a crash may have cut it short).
func (s *Server) workspaceArchive(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("workspace_id")
	if id == apitype.DefaultWorkspaceID {
		return invalid("", "the default workspace cannot be archived")
	}
	now := s.now()
	ws, err := s.store.WorkspaceUpdate(r.Context(), id, func(ws *apitype.Workspace) error {
		ws.ArchivedAt = &now
		return nil
	})
	if err != nil {
		return lookup(err, "workspace", id)
	}
	if err := s.stopWorkspace(context.WithoutCancel(r.Context()), id); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, ws)
}

// stopWorkspace archives the workspace's deployments and interrupts its running sessions.
func (s *Server) stopWorkspace(ctx context.Context, ws string) error {
	ctx = withWorkspace(ctx, ws)
	for {
		deps, err := s.store.DeploymentList(ctx, &store.DeploymentListParams{
			ListParams: store.ListParams{Limit: workspaceStopBatches, Workspace: ws}})
		if err != nil {
			return err
		}
		for _, d := range deps {
			if _, err := s.store.DeploymentUpdate(ctx, d.Deployment.ID, func(rec *store.DeploymentRecord) error {
				return archiveDeployment(&rec.Deployment, s.now())
			}); err != nil && !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("archive deployment %s: %w", d.Deployment.ID, err)
			}
		}
		if len(deps) < workspaceStopBatches {
			break
		}
	}
	p := store.SessionListParams{ListParams: store.ListParams{Limit: workspaceStopBatches, Workspace: ws},
		Statuses: []string{apitype.StatusRunning, apitype.StatusRescheduling}}
	for {
		page, err := s.store.SessionList(ctx, &p)
		if err != nil {
			return err
		}
		for _, sess := range page {
			if err := s.stopSession(ctx, sess.ID); err != nil {
				return err
			}
		}
		if len(page) < p.Limit {
			return nil
		}
		last := page[len(page)-1]
		p.After = &store.Cursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
}

// apiKeyView is an API key as the admin API shows it (the SDK's APIKey).
type apiKeyView struct {
	Type           apitype.ObjectType `json:"type"` // "api_key"
	ID             string             `json:"id"`
	Name           string             `json:"name"`
	CreatedAt      string             `json:"created_at"`
	CreatedBy      actorRef           `json:"created_by"`
	ExpiresAt      *string            `json:"expires_at"`
	PartialKeyHint string             `json:"partial_key_hint"`
	Principal      principal          `json:"principal"`
	Scope          keyScope           `json:"scope"`
	Status         string             `json:"status"`
	// Secret is the key itself, shown once by Corral's create extension.
	Secret string `json:"secret,omitempty"`
}

type actorRef struct {
	ID   string `json:"id"`
	Type string `json:"type"`
}

type principal struct {
	Type             string `json:"type"`
	ServiceAccountID string `json:"service_account_id"`
}

type keyScope struct {
	Type        string `json:"type"` // "organization" or "workspace"
	WorkspaceID string `json:"workspace_id,omitempty"`
}

// operatorAccount is the service account every key of a server is created by and acts as: the server's operator.
const operatorAccount = "svcacct_corral_operator"

func viewAPIKey(k *apitype.APIKey) *apiKeyView {
	v := &apiKeyView{Type: "api_key", ID: k.ID, Name: k.Name, CreatedAt: k.CreatedAt.UTC().Format(apitype.TimeFormat),
		CreatedBy:      actorRef{ID: operatorAccount, Type: "service_account"},
		PartialKeyHint: apitype.APIKeySecretPrefix + "..." + k.Hint,
		Principal:      principal{Type: "service_account_actor", ServiceAccountID: operatorAccount},
		Scope:          keyScope{Type: "organization"}, Status: k.Status()}
	if k.WorkspaceID != "" {
		v.Scope = keyScope{Type: "workspace", WorkspaceID: k.WorkspaceID}
	}
	return v
}

var apiKeyStatuses = []string{apitype.APIKeyActive, apitype.APIKeyInactive, apitype.APIKeyArchived}

func (s *Server) apiKeyGet(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("api_key_id")
	k, err := s.store.APIKeyGet(r.Context(), id)
	if err != nil {
		return lookup(err, "api key", id)
	}
	return writeJSON(w, http.StatusOK, viewAPIKey(k))
}

type apiKeyUpdateRequest struct {
	Name   nullable[string] `json:"name"`
	Status nullable[string] `json:"status"`
}

func (s *Server) apiKeyUpdate(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("api_key_id")
	var req apiKeyUpdateRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	if req.Name.Set {
		if err := checkString("name", req.Name.Value, true, maxAPIKeyNameLen); err != nil {
			return err
		}
	}
	if req.Status.Set && !slices.Contains(apiKeyStatuses, req.Status.Value) {
		return invalid("status", `must be "active", "inactive" or "archived"`)
	}
	now := s.now()
	k, err := s.store.APIKeyUpdate(r.Context(), id, func(k *apitype.APIKey) error {
		if k.RevokedAt != nil && (req.Name.Set || req.Status.Set && req.Status.Value != apitype.APIKeyArchived) {
			return invalid("", "api key %s is archived", id)
		}
		if req.Name.Set {
			k.Name = req.Name.Value
		}
		switch req.Status.Value {
		case apitype.APIKeyActive:
			k.Inactive = false
		case apitype.APIKeyInactive:
			k.Inactive = true
		case apitype.APIKeyArchived:
			k.RevokedAt = &now
		}
		return nil
	})
	if err != nil {
		return lookup(err, "api key", id)
	}
	return writeJSON(w, http.StatusOK, viewAPIKey(k))
}

func (s *Server) apiKeyList(w http.ResponseWriter, r *http.Request) error {
	q := newQuery(r.URL)
	ws, status := q.str("workspace_id"), q.str("status")
	if status != "" && status != "expired" && !slices.Contains(apiKeyStatuses, status) {
		return invalid("status", `must be "active", "inactive", "archived" or "expired"`)
	}
	keys, err := s.store.APIKeyList(r.Context())
	if err != nil {
		return err
	}
	var all []apiKeyView
	for i := range slices.Backward(keys) { // newest first
		k := &keys[i]
		if ws != "" && k.WorkspaceID != ws || status != "" && k.Status() != status {
			continue
		}
		all = append(all, *viewAPIKey(k))
	}
	return writeIDPage(w, q, all, func(v *apiKeyView) string { return v.ID })
}

type apiKeyCreateRequest struct {
	Name        string `json:"name"`
	WorkspaceID string `json:"workspace_id"`
}

// apiKeyCreate mints a key (Corral's extension: the hosted service creates keys in its console). A key of a
// workspace acts in it alone; one with no workspace_id is an organization admin key. The secret is in the
// answer, once: only its hash is stored.
func (s *Server) apiKeyCreate(w http.ResponseWriter, r *http.Request) error {
	var req apiKeyCreateRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	if err := checkString("name", req.Name, false, maxAPIKeyNameLen); err != nil {
		return err
	}
	if req.WorkspaceID != "" {
		ws, err := s.store.WorkspaceGet(r.Context(), req.WorkspaceID)
		if errors.Is(err, store.ErrNotFound) {
			return invalid("workspace_id", "no workspace %q", req.WorkspaceID)
		}
		if err != nil {
			return err
		}
		if ws.ArchivedAt != nil {
			return invalid("workspace_id", "workspace %s is archived", ws.ID)
		}
	}
	secret, k := apitype.NewAPIKey(req.Name, req.WorkspaceID, s.now())
	if err := s.store.APIKeyCreate(r.Context(), k); err != nil {
		return err
	}
	v := viewAPIKey(k)
	v.Secret = secret
	return writeJSON(w, http.StatusOK, v)
}
