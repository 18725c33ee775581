package apitype

import (
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"
)

// Agent is a versioned agent configuration. Every update writes a new version.
type Agent struct {
	Type              ObjectType        `json:"type"` // "agent"
	ID                string            `json:"id"`
	Version           int               `json:"version"`
	Name              string            `json:"name"`
	Description       string            `json:"description"`
	System            string            `json:"system"`
	Model             ModelConfig       `json:"model"`
	Tools             []Tool            `json:"tools"`
	MCPServers        []MCPServer       `json:"mcp_servers"`
	Skills            []SkillRef        `json:"skills"`
	Multiagent        json.RawMessage   `json:"multiagent"`
	ExecutionIdentity ExecutionIdentity `json:"execution_identity"`
	Metadata          map[string]string `json:"metadata"`
	CreatedAt         time.Time         `json:"created_at"`
	UpdatedAt         time.Time         `json:"updated_at"`
	ArchivedAt        *time.Time        `json:"archived_at"`
}

// ModelConfig names the model and how it runs.
type ModelConfig struct {
	ID           string  `json:"id"`
	Effort       *Effort `json:"effort"`
	Speed        string  `json:"speed,omitempty"`
	InferenceGeo string  `json:"inference_geo,omitempty"`
}

// Effort is the reasoning effort, in object form.
type Effort struct {
	Type EffortType `json:"type"`
}

// Tool is one entry of an agent's tools: the built-in toolset, an MCP toolset or a custom tool.
type Tool struct {
	Type ToolType `json:"type"`

	// agent_toolset_20260401 and mcp_toolset
	MCPServerName string        `json:"mcp_server_name,omitempty"`
	DefaultConfig *ToolDefaults `json:"default_config,omitempty"`
	Configs       []ToolConfig  `json:"configs,omitzero"` // [] for toolsets, nil (omitted) for custom tools

	// custom
	Name        string          `json:"name,omitempty"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}

// ToolDefaults is a toolset's default_config.
type ToolDefaults struct {
	Enabled          bool             `json:"enabled"`
	PermissionPolicy PermissionPolicy `json:"permission_policy"`
}

// ToolConfig configures one tool of a toolset. Extra holds tool-specific fields (web_fetch, web_search).
type ToolConfig struct {
	Name             string           `json:"name"`
	Type             BuiltinToolType  `json:"type,omitempty"` // a built-in tool's: its name
	Enabled          bool             `json:"enabled"`
	PermissionPolicy PermissionPolicy `json:"permission_policy"`

	// web_fetch and web_search only.
	AllowedDomains []string `json:"allowed_domains,omitempty"`
	BlockedDomains []string `json:"blocked_domains,omitempty"`
	// web_fetch only.
	MaxContentTokens *int           `json:"max_content_tokens,omitempty"`
	URLSources       *WebURLSources `json:"url_sources,omitempty"`
	// web_search only: {"type":"approximate","city","region","country","timezone"}.
	UserLocation json.RawMessage `json:"user_location,omitempty"`
}

// WebURLSources says which URLs web_fetch may fetch, by where the URL came from. Each filter is a JSON object
// ({"type":"all"|"none"} or {"type":"only"|"except","tools":[...]}); null means not set (all).
type WebURLSources struct {
	UserInput         json.RawMessage `json:"user_input"`
	ClientToolResults json.RawMessage `json:"client_tool_results"`
	ServerToolResults json.RawMessage `json:"server_tool_results"`
}

// PermissionPolicy decides whether a tool call runs, asks, or is refused.
type PermissionPolicy struct {
	Type PermissionPolicyType `json:"type"`
}

// BuiltinTools are the tools of agent_toolset_20260401, in the reference order.
var BuiltinTools = []string{"bash", "edit", "read", "write", "glob", "grep", "web_fetch", "web_search"}

// MCPServer is a remote MCP server an agent may call.
type MCPServer struct {
	Type MCPServerType `json:"type"` // "url"
	Name string        `json:"name"`
	URL  string        `json:"url"`
}

// SkillRef references a skill by id and version.
type SkillRef struct {
	Type    SkillSourceType `json:"type"`
	SkillID string          `json:"skill_id"`
	Version string          `json:"version"`
}

// ExecutionIdentity is whom the agent acts as.
type ExecutionIdentity struct {
	Type    ExecutionIdentityType `json:"type"`
	RoleARN string                `json:"role_arn,omitempty"`
}

// Environment is where a session's tools run: cloud (Corral's own sandboxes) or self_hosted.
type Environment struct {
	Type        ObjectType        `json:"type"` // "environment"
	ID          string            `json:"id"`
	Name        string            `json:"name"`
	Description *string           `json:"description"`
	Config      EnvConfig         `json:"config"`
	Metadata    map[string]string `json:"metadata"`
	Scope       string            `json:"scope,omitempty"`
	CreatedAt   time.Time         `json:"created_at"`
	UpdatedAt   time.Time         `json:"updated_at"`
	ArchivedAt  *time.Time        `json:"archived_at"`
	// Image is Corral's own: the build of the root filesystem the environment's sandboxes run on (the base
	// and its packages). Nil for a self-hosted environment, or on a server that builds no images.
	Image *EnvironmentImage `json:"image,omitempty"`
}

// Image build statuses (EnvironmentImage.Status).
const (
	ImageBuilding = "building"
	ImageReady    = "ready"
	ImageFailed   = "failed"
)

// EnvironmentImage is the status of an environment's image: building, ready or failed (with the package that
// failed and why). ID is the image's content address: the base's id for an environment without packages,
// else a hash of the base and the package list, shared by every environment with the same list.
type EnvironmentImage struct {
	Status string           `json:"status"`
	ID     string           `json:"id"`
	Error  *ImageBuildError `json:"error,omitempty"`
	// UpdatedAt is when the status was last set.
	UpdatedAt time.Time `json:"updated_at"`
}

// ImageBuildError says why an image build failed: the manager and package at fault (empty when the failure
// is no single package's, e.g. an unreachable Debian mirror) and the reason with the build's last output.
type ImageBuildError struct {
	Manager string `json:"manager,omitempty"`
	Package string `json:"package,omitempty"`
	Message string `json:"message"`
}

// EnvConfig is an environment's configuration.
type EnvConfig struct {
	Type       EnvironmentType `json:"type"`
	Networking *Networking     `json:"networking,omitempty"`
	Packages   *Packages       `json:"packages,omitempty"`
}

// Networking is an environment's network policy.
type Networking struct {
	Type                 NetworkingType `json:"type"`
	AllowedHosts         []string       `json:"allowed_hosts,omitempty"`
	AllowMCPServers      *bool          `json:"allow_mcp_servers,omitempty"`
	AllowPackageManagers *bool          `json:"allow_package_managers,omitempty"`
}

// MaxPackages is the most packages an environment may list for one package manager.
const MaxPackages = 256

// Packages lists packages to install in an environment, per package manager.
type Packages struct {
	Type  PackagesType `json:"type"`
	Apt   []string     `json:"apt"`
	Cargo []string     `json:"cargo"`
	Gem   []string     `json:"gem"`
	Go    []string     `json:"go"`
	Npm   []string     `json:"npm"`
	Pip   []string     `json:"pip"`
}

// Session statuses.
const (
	StatusRescheduling = "rescheduling"
	StatusRunning      = "running"
	StatusIdle         = "idle"
	StatusTerminated   = "terminated"
)

// Session is one agent run.
type Session struct {
	Type               ObjectType        `json:"type"` // "session"
	ID                 string            `json:"id"`
	Title              *string           `json:"title"`
	EnvironmentID      string            `json:"environment_id"`
	Status             string            `json:"status"`
	Agent              SessionAgent      `json:"agent"`
	Resources          []Resource        `json:"resources"`
	VaultIDs           []string          `json:"vault_ids"`
	Metadata           map[string]string `json:"metadata"`
	Budget             json.RawMessage   `json:"budget"`
	OutcomeEvaluations []json.RawMessage `json:"outcome_evaluations"`
	Stats              SessionStats      `json:"stats"`
	Usage              SessionUsage      `json:"usage"`
	DeploymentID       *string           `json:"deployment_id"`
	CreatedAt          time.Time         `json:"created_at"`
	UpdatedAt          time.Time         `json:"updated_at"`
	ArchivedAt         *time.Time        `json:"archived_at"`
}

// SessionAgent is the snapshot of the agent a session runs.
type SessionAgent struct {
	Type              ObjectType        `json:"type"` // "agent"
	ID                string            `json:"id"`
	Version           int               `json:"version"`
	Name              string            `json:"name"`
	Description       string            `json:"description"`
	System            string            `json:"system"`
	Model             ModelConfig       `json:"model"`
	Tools             []Tool            `json:"tools"`
	MCPServers        []MCPServer       `json:"mcp_servers"`
	Skills            []SkillRef        `json:"skills"`
	ExecutionIdentity ExecutionIdentity `json:"execution_identity"`
	Multiagent        json.RawMessage   `json:"multiagent"`
}

// SessionStats holds a session's timings.
type SessionStats struct {
	ActiveSeconds   float64 `json:"active_seconds"`
	DurationSeconds float64 `json:"duration_seconds"`
}

// SessionUsage is the usage accumulated over a session: tokens by kind, server tools, list cost and active time.
type SessionUsage struct {
	InputTokens          int64          `json:"input_tokens"`
	OutputTokens         int64          `json:"output_tokens"`
	CacheReadInputTokens int64          `json:"cache_read_input_tokens"`
	CacheCreation        *CacheCreation `json:"cache_creation,omitempty"`
	ServerToolUse        ServerToolUse  `json:"server_tool_use"`
	// ListCost is the cost at list prices, rounded up to the cent; absent while a model the session ran has no
	// list price (an unbudgeted session on a model the price table does not name).
	ListCost *Money `json:"list_cost,omitempty"`
	// ListCostPicodollars is Corral's own field: the exact list cost in picodollars (1e-12 USD), which ListCost
	// rounds up, and which the budget is checked against.
	ListCostPicodollars int64 `json:"list_cost_picodollars,omitempty"`
	// Unpriced is Corral's own field: a model request of the session was on a model with no list price, so
	// ListCost is absent for good.
	Unpriced bool `json:"unpriced,omitempty"`
	// ActiveSeconds is the time the session spent running (the API fills it from the session's stats).
	ActiveSeconds float64 `json:"active_seconds"`
}

// ServerToolUse counts the requests of server-executed tools.
type ServerToolUse struct {
	WebSearchRequests int64 `json:"web_search_requests"`
	WebFetchRequests  int64 `json:"web_fetch_requests"`
}

// Money is an amount in a currency's minor units, as an integer decimal string ("2500" is $25.00).
type Money struct {
	Amount   string `json:"amount"`
	Currency string `json:"currency"` // "USD"
}

// Budget is «Budget»: a session's cap on its list cost.
type Budget struct {
	Type        BudgetType `json:"type"`
	MaxListCost Money      `json:"max_list_cost"`
}

// ParseBudget reads a session's stored budget: nil for none (absent or null).
func ParseBudget(raw json.RawMessage) (*Budget, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var b Budget
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, fmt.Errorf("budget: %w", err)
	}
	return &b, nil
}

// Cents is the budget's cap in US cents; false when the amount is not a whole number of cents in USD.
func (b *Budget) Cents() (int64, bool) {
	if b.MaxListCost.Currency != "USD" {
		return 0, false
	}
	n, err := strconv.ParseInt(b.MaxListCost.Amount, 10, 64)
	return n, err == nil && n >= 0
}

// CacheCreation counts tokens written to the prompt cache.
type CacheCreation struct {
	Ephemeral5mInputTokens int64 `json:"ephemeral_5m_input_tokens"`
	Ephemeral1hInputTokens int64 `json:"ephemeral_1h_input_tokens"`
}

// Resource is something mounted into a session's workspace: a git repository, a file or a memory store.
type Resource struct {
	ID            string         `json:"id"`
	Type          ResourceType   `json:"type"`
	URL           string         `json:"url,omitempty"`
	MountPath     string         `json:"mount_path,omitempty"`
	Checkout      *Checkout      `json:"checkout,omitempty"`
	FileID        string         `json:"file_id,omitempty"`
	MemoryStoreID string         `json:"memory_store_id,omitempty"`
	Access        ResourceAccess `json:"access,omitempty"`
	Instructions  string         `json:"instructions,omitempty"`
	// Name and Description are a memory store's, as they were when it was attached.
	Name        string    `json:"name,omitempty"`
	Description string    `json:"description,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// Path is where the resource appears in a sandbox: its mount path, or its type's default (/workspace/<repository
// name> for a repository, /mnt/session/uploads/<file_id> for a file); "" when it has neither.
func (r *Resource) Path() string {
	switch {
	case r.MountPath != "":
		return r.MountPath
	case r.Type == ResourceGitHubRepository:
		if name, err := RepoName(r.URL); err == nil {
			return "/workspace/" + name
		}
	case r.Type == ResourceFile:
		return "/mnt/session/uploads/" + r.FileID
	}
	return ""
}

// RepoName is the name of the repository at rawURL: the last element of its path without ".git", the directory
// a github_repository resource is mounted at by default (/workspace/<name>). An error if the URL names none.
func RepoName(rawURL string) (string, error) {
	p := rawURL
	if u, err := url.Parse(rawURL); err == nil && u.Scheme != "" {
		p = u.Path
	}
	name := strings.TrimSuffix(path.Base(strings.TrimRight(p, "/")), ".git")
	if name == "" || name == "." || name == ".." || name == "/" {
		return "", fmt.Errorf("repository URL %q names no repository", rawURL)
	}
	return name, nil
}

// APIKey is a key clients authenticate with. Only its hash is stored.
type APIKey struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Hash      string     `json:"-"`
	Hint      string     `json:"hint"` // the last four characters
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at"` // archived: it never works again
	// WorkspaceID is the workspace the key belongs to; "" is an organization admin key, which manages the
	// workspaces and keys and works on the resources of the workspace a request names (the default one if none).
	WorkspaceID string `json:"workspace_id"`
	Inactive    bool   `json:"inactive"` // turned off by the admin API; it can be turned on again
}

// Status is the key's status on the admin API.
func (k *APIKey) Status() string {
	switch {
	case k.RevokedAt != nil:
		return APIKeyArchived
	case k.Inactive:
		return APIKeyInactive
	}
	return APIKeyActive
}

// File is a file of the Files API: «FileMetadata». Its bytes are in the blob store.
type File struct {
	Type         ObjectType `json:"type"` // "file"
	ID           string     `json:"id"`
	Filename     string     `json:"filename"`
	MimeType     string     `json:"mime_type"`
	SizeBytes    int64      `json:"size_bytes"`
	CreatedAt    time.Time  `json:"created_at"`
	Downloadable bool       `json:"downloadable"`
	ExpiresAt    *time.Time `json:"expires_at"`
	Scope        *FileScope `json:"scope,omitempty"`
}

// FileScope is what a file was created in: {"type":"session","id":"sesn_..."} for a session's outputs.
type FileScope struct {
	Type FileScopeType `json:"type"`
	ID   string        `json:"id"`
}

// Skill is a skill of the Skills API: «Skill».
type Skill struct {
	Type            ObjectType  `json:"type"` // "skill"
	ID              string      `json:"id"`
	DisplayName     string      `json:"display_name"`
	Source          SkillSource `json:"source"`
	LatestVersionID string      `json:"latest_version_id"`
	CreatedAt       time.Time   `json:"created_at"`
	UpdatedAt       time.Time   `json:"updated_at"`
}

// SkillSource says where a skill comes from: {"type":"custom"} for the skills uploaded here.
type SkillSource struct {
	Type SkillSourceType `json:"type"`
}

// SkillVersion is a version of a skill: «SkillVersion». Name and Description come from its SKILL.md; Name is the
// directory the skill's files are under.
type SkillVersion struct {
	Type        ObjectType `json:"type"` // "skill_version"
	ID          string     `json:"id"`
	SkillID     string     `json:"skill_id"`
	Name        string     `json:"name"`
	Description string     `json:"description"`
	CreatedAt   time.Time  `json:"created_at"`
}

// GitSmartHTTP reports whether a request to a repository is one of git's smart-HTTP requests that Corral
// forwards with the repository's token (the sandboxes' git endpoint, internal/proxy, and the git relay of
// `corral worker`, POST /v1/sessions/{id}/resources/{id}/git/...): GET info/refs?service=git-upload-pack or
// git-receive-pack, POST git-upload-pack and POST git-receive-pack. op is the path after the repository's URL,
// service the service query parameter.
func GitSmartHTTP(method, op, service string) bool {
	switch {
	case method == "GET" && op == "info/refs":
		return service == "git-upload-pack" || service == "git-receive-pack"
	case method == "POST":
		return op == "git-upload-pack" || op == "git-receive-pack"
	}
	return false
}
