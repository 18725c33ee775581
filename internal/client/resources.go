package client

import (
	"context"
	"encoding/json"
	"net/url"
	"strconv"

	"github.com/corralhq/corral/internal/apitype"
)

// AgentCreateParams is the body of POST /v1/agents.
type AgentCreateParams struct {
	Name        string              `json:"name"`
	Model       apitype.ModelConfig `json:"model"`
	Description string              `json:"description,omitempty"`
	System      string              `json:"system,omitempty"`
	Tools       []apitype.Tool      `json:"tools,omitempty"`
	MCPServers  []apitype.MCPServer `json:"mcp_servers,omitempty"`
	Skills      []apitype.SkillRef  `json:"skills,omitempty"`
	Metadata    map[string]string   `json:"metadata,omitempty"`
	// Multiagent is the agent's multiagent configuration as the API takes it (docs/multiagent.md); nil: none.
	Multiagent json.RawMessage `json:"multiagent,omitempty"`
}

// AgentUpdateParams is the body of POST /v1/agents/{id}: nil fields are kept. Each update that changes
// something writes a new version.
type AgentUpdateParams struct {
	// Version, if set, makes the update conditional on the agent's latest version (409 otherwise).
	Version     *int                 `json:"version,omitempty"`
	Name        *string              `json:"name,omitempty"`
	Description *string              `json:"description,omitempty"`
	System      *string              `json:"system,omitempty"`
	Model       *apitype.ModelConfig `json:"model,omitempty"`
	Tools       *[]apitype.Tool      `json:"tools,omitempty"`
	MCPServers  *[]apitype.MCPServer `json:"mcp_servers,omitempty"`
	Skills      *[]apitype.SkillRef  `json:"skills,omitempty"`
	// Metadata merges: a nil value deletes the key.
	Metadata map[string]*string `json:"metadata,omitempty"`
}

// AgentCreate creates an agent (version 1).
func (c *Client) AgentCreate(ctx context.Context, p *AgentCreateParams) (*apitype.Agent, error) {
	return call[apitype.Agent](ctx, c, "POST", "/v1/agents", nil, p)
}

// AgentGet returns an agent: version 0 is the latest.
func (c *Client) AgentGet(ctx context.Context, id string, version int) (*apitype.Agent, error) {
	q := url.Values{}
	if version > 0 {
		q.Set("version", strconv.Itoa(version))
	}
	return call[apitype.Agent](ctx, c, "GET", pathOf("/v1/agents/", id), q, nil)
}

// AgentList returns a page of agents, newest first.
func (c *Client) AgentList(ctx context.Context, p *ListParams) (*Page[apitype.Agent], error) {
	return call[Page[apitype.Agent]](ctx, c, "GET", "/v1/agents", p.values(), nil)
}

// AgentUpdate updates an agent and returns its latest version.
func (c *Client) AgentUpdate(ctx context.Context, id string, p *AgentUpdateParams) (*apitype.Agent, error) {
	return call[apitype.Agent](ctx, c, "POST", pathOf("/v1/agents/", id), nil, p)
}

// AgentArchive archives an agent: sessions may no longer be created with it.
func (c *Client) AgentArchive(ctx context.Context, id string) (*apitype.Agent, error) {
	return call[apitype.Agent](ctx, c, "POST", pathOf("/v1/agents/", id, "/archive"), nil, struct{}{})
}

// EnvironmentCreateParams is the body of POST /v1/environments.
type EnvironmentCreateParams struct {
	Name        string            `json:"name"`
	Description *string           `json:"description,omitempty"`
	Config      apitype.EnvConfig `json:"config"`
	Metadata    map[string]string `json:"metadata,omitempty"`
}

// EnvironmentUpdateParams is the body of POST /v1/environments/{id}: nil fields are kept.
type EnvironmentUpdateParams struct {
	Name        *string            `json:"name,omitempty"`
	Description *string            `json:"description,omitempty"`
	Config      *apitype.EnvConfig `json:"config,omitempty"`
	// Metadata merges: a nil value deletes the key.
	Metadata map[string]*string `json:"metadata,omitempty"`
}

// EnvironmentCreate creates an environment.
func (c *Client) EnvironmentCreate(ctx context.Context, p *EnvironmentCreateParams) (*apitype.Environment, error) {
	return call[apitype.Environment](ctx, c, "POST", "/v1/environments", nil, p)
}

// EnvironmentGet returns an environment.
func (c *Client) EnvironmentGet(ctx context.Context, id string) (*apitype.Environment, error) {
	return call[apitype.Environment](ctx, c, "GET", pathOf("/v1/environments/", id), nil, nil)
}

// EnvironmentList returns a page of environments, newest first.
func (c *Client) EnvironmentList(ctx context.Context, p *ListParams) (*Page[apitype.Environment], error) {
	return call[Page[apitype.Environment]](ctx, c, "GET", "/v1/environments", p.values(), nil)
}

// EnvironmentUpdate updates an environment.
func (c *Client) EnvironmentUpdate(ctx context.Context, id string, p *EnvironmentUpdateParams) (*apitype.Environment, error) {
	return call[apitype.Environment](ctx, c, "POST", pathOf("/v1/environments/", id), nil, p)
}

// EnvironmentArchive archives an environment.
func (c *Client) EnvironmentArchive(ctx context.Context, id string) (*apitype.Environment, error) {
	return call[apitype.Environment](ctx, c, "POST", pathOf("/v1/environments/", id, "/archive"), nil, struct{}{})
}

// EnvironmentDelete deletes an environment.
func (c *Client) EnvironmentDelete(ctx context.Context, id string) (*Deleted, error) {
	return call[Deleted](ctx, c, "DELETE", pathOf("/v1/environments/", id), nil, nil)
}

// AgentRef names the agent a session runs: its latest version (Version 0) or a given one.
type AgentRef struct {
	ID      string
	Version int
}

// MarshalJSON writes the id alone, or {"type":"agent","id":...,"version":...} for a pinned version.
func (r AgentRef) MarshalJSON() ([]byte, error) {
	if r.Version == 0 {
		return json.Marshal(r.ID)
	}
	return json.Marshal(struct {
		Type    string `json:"type"`
		ID      string `json:"id"`
		Version int    `json:"version"`
	}{"agent", r.ID, r.Version})
}

// ResourceParams is a resource to mount in a session: a github_repository (URL, MountPath, Checkout,
// AuthorizationToken), a file (FileID, MountPath) or a memory_store (MemoryStoreID, Access).
type ResourceParams struct {
	Type               string          `json:"type"`
	URL                string          `json:"url,omitempty"`
	MountPath          string          `json:"mount_path,omitempty"`
	Checkout           json.RawMessage `json:"checkout,omitempty"`
	AuthorizationToken string          `json:"authorization_token,omitempty"`
	FileID             string          `json:"file_id,omitempty"`
	// MemoryStoreID and Access are a memory_store's (Access read_write or read_only; "" is read_write).
	MemoryStoreID string `json:"memory_store_id,omitempty"`
	Access        string `json:"access,omitempty"`
}

// SessionCreateParams is the body of POST /v1/sessions.
type SessionCreateParams struct {
	Agent         AgentRef
	EnvironmentID string
	Title         string
	// InitialEvents are appended with the session, in one write: a user.message here starts the first turn.
	InitialEvents []apitype.NewEvent
	Resources     []ResourceParams
	VaultIDs      []string
	Metadata      map[string]string
}

// MarshalJSON writes the request body, each initial event in its wire form.
func (p SessionCreateParams) MarshalJSON() ([]byte, error) {
	events := make([]wireEvent, len(p.InitialEvents))
	for i, e := range p.InitialEvents {
		events[i] = wireEvent(e)
	}
	return json.Marshal(struct {
		Agent         AgentRef          `json:"agent"`
		EnvironmentID string            `json:"environment_id"`
		Title         string            `json:"title,omitempty"`
		InitialEvents []wireEvent       `json:"initial_events,omitempty"`
		Resources     []ResourceParams  `json:"resources,omitempty"`
		VaultIDs      []string          `json:"vault_ids,omitempty"`
		Metadata      map[string]string `json:"metadata,omitempty"`
	}{p.Agent, p.EnvironmentID, p.Title, events, p.Resources, p.VaultIDs, p.Metadata})
}

// SessionUpdateParams is the body of POST /v1/sessions/{id}: nil fields are kept.
type SessionUpdateParams struct {
	Title *string `json:"title,omitempty"`
	// Metadata merges: a nil value deletes the key.
	Metadata map[string]*string `json:"metadata,omitempty"`
	VaultIDs *[]string          `json:"vault_ids,omitempty"`
}

// SessionListParams filters and pages GET /v1/sessions.
type SessionListParams struct {
	ListParams
	// AgentID lists only the sessions of this agent.
	AgentID string
	// Statuses lists only sessions in these statuses (apitype.StatusIdle, ...).
	Statuses []string
}

// SessionCreate creates a session.
func (c *Client) SessionCreate(ctx context.Context, p *SessionCreateParams) (*apitype.Session, error) {
	return call[apitype.Session](ctx, c, "POST", "/v1/sessions", nil, p)
}

// SessionGet returns a session.
func (c *Client) SessionGet(ctx context.Context, id string) (*apitype.Session, error) {
	return call[apitype.Session](ctx, c, "GET", pathOf("/v1/sessions/", id), nil, nil)
}

// SessionList returns a page of sessions, newest first.
func (c *Client) SessionList(ctx context.Context, p *SessionListParams) (*Page[apitype.Session], error) {
	var q url.Values
	if p == nil {
		q = url.Values{}
	} else {
		q = p.ListParams.values()
		if p.AgentID != "" {
			q.Set("agent_id", p.AgentID)
		}
		for _, s := range p.Statuses {
			q.Add("statuses[]", s)
		}
	}
	return call[Page[apitype.Session]](ctx, c, "GET", "/v1/sessions", q, nil)
}

// SessionUpdate updates a session's title, metadata or vaults.
func (c *Client) SessionUpdate(ctx context.Context, id string, p *SessionUpdateParams) (*apitype.Session, error) {
	return call[apitype.Session](ctx, c, "POST", pathOf("/v1/sessions/", id), nil, p)
}

// SessionArchive archives a session.
func (c *Client) SessionArchive(ctx context.Context, id string) (*apitype.Session, error) {
	return call[apitype.Session](ctx, c, "POST", pathOf("/v1/sessions/", id, "/archive"), nil, struct{}{})
}

// SessionDelete deletes a session and its log.
func (c *Client) SessionDelete(ctx context.Context, id string) (*Deleted, error) {
	return call[Deleted](ctx, c, "DELETE", pathOf("/v1/sessions/", id), nil, nil)
}
