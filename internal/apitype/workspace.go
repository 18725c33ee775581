package apitype

import "time"

// PrefixWorkspace starts a workspace's id, as the hosted service's do.
const PrefixWorkspace = "wrkspc_"

// ObjectWorkspace is a workspace of the admin API.
const ObjectWorkspace ObjectType = "workspace"

// Workspace is a workspace of the admin API (GET /v1/organizations/workspaces/{id}): the unit every resource
// and every workspace API key belongs to.
type Workspace struct {
	Type          ObjectType        `json:"type"` // "workspace"
	ID            string            `json:"id"`
	Name          string            `json:"name"`
	DisplayColor  string            `json:"display_color"`
	Tags          map[string]string `json:"tags"`
	CreatedAt     time.Time         `json:"created_at"`
	ArchivedAt    *time.Time        `json:"archived_at"`
	DataResidency DataResidency     `json:"data_residency"`
}

// DataResidency is where a workspace's data lives: on a self-hosted server, on the server.
type DataResidency struct {
	AllowedInferenceGeos string `json:"allowed_inference_geos"` // "unrestricted"
	DefaultInferenceGeo  string `json:"default_inference_geo"`
	WorkspaceGeo         string `json:"workspace_geo"`
}

// Status of an API key on the admin API.
const (
	APIKeyActive   = "active"
	APIKeyInactive = "inactive"
	APIKeyArchived = "archived"
)
