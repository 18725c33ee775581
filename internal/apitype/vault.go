package apitype

import "time"

// ID prefixes of vaults and their credentials.
const (
	PrefixVault      = "vlt_"
	PrefixCredential = "vcrd_"
)

// Vault is a named collection of credentials that sessions reference by id («Vault»).
type Vault struct {
	Type        ObjectType        `json:"type"` // "vault"
	ID          string            `json:"id"`
	DisplayName string            `json:"display_name"`
	Metadata    map[string]string `json:"metadata"`
	CreatedAt   time.Time         `json:"created_at"`
	UpdatedAt   time.Time         `json:"updated_at"`
	ArchivedAt  *time.Time        `json:"archived_at"`
}

// Credential is a vault credential as the API shows it («Credential»): the auth's non-secret configuration
// only. Its secrets are sealed separately (store.SealedSecret) and never part of this document.
type Credential struct {
	Type        ObjectType        `json:"type"` // "vault_credential"
	ID          string            `json:"id"`
	VaultID     string            `json:"vault_id"`
	DisplayName *string           `json:"display_name"`
	Metadata    map[string]string `json:"metadata"`
	Auth        CredentialAuth    `json:"auth"`
	CreatedAt   time.Time         `json:"created_at"`
	UpdatedAt   time.Time         `json:"updated_at"`
	ArchivedAt  *time.Time        `json:"archived_at"`
}

// CredentialAuth is the non-secret part of a credential's auth («CredAuth»), a union by Type: mcp_oauth and
// static_bearer have MCPServerURL (mcp_oauth also ExpiresAt and Refresh); environment_variable has SecretName,
// InjectionLocation and Networking.
type CredentialAuth struct {
	Type              CredentialAuthType    `json:"type"`
	MCPServerURL      string                `json:"mcp_server_url,omitempty"`
	ExpiresAt         *time.Time            `json:"expires_at,omitempty"`
	Refresh           *OAuthRefresh         `json:"refresh,omitempty"`
	SecretName        string                `json:"secret_name,omitempty"`
	InjectionLocation *InjectionLocation    `json:"injection_location,omitempty"`
	Networking        *CredentialNetworking `json:"networking,omitempty"`
}

// OAuthRefresh is an mcp_oauth credential's refresh configuration, without its refresh token and client secret.
type OAuthRefresh struct {
	ClientID          string            `json:"client_id"`
	TokenEndpoint     string            `json:"token_endpoint"`
	TokenEndpointAuth TokenEndpointAuth `json:"token_endpoint_auth"`
	Resource          *string           `json:"resource"`
	Scope             *string           `json:"scope"`
}

// TokenEndpointAuth says how the client authenticates to the token endpoint (the client secret itself is
// sealed).
type TokenEndpointAuth struct {
	Type TokenEndpointAuthType `json:"type"`
}

// InjectionLocation says where an environment_variable credential's placeholder is replaced.
type InjectionLocation struct {
	Body   bool `json:"body"`
	Header bool `json:"header"`
}

// CredentialNetworking lists the hosts an environment_variable credential's value may be sent to: "unrestricted"
// or "limited" with AllowedHosts.
type CredentialNetworking struct {
	Type         NetworkingType `json:"type"`
	AllowedHosts []string       `json:"allowed_hosts,omitempty"`
}

// CredentialValidation is the answer of mcp_oauth_validate («CredentialValidation»): whether the credential works
// against its MCP server, what failed, and how its refresh went.
type CredentialValidation struct {
	Type            ObjectType           `json:"type"` // "vault_credential_validation"
	CredentialID    string               `json:"credential_id"`
	VaultID         string               `json:"vault_id"`
	Status          string               `json:"status"` // valid | invalid | unknown
	HasRefreshToken bool                 `json:"has_refresh_token"`
	ValidatedAt     time.Time            `json:"validated_at"`
	MCPProbe        *MCPProbe            `json:"mcp_probe"` // the failing step; null when the probe succeeded
	Refresh         *CredentialRefreshed `json:"refresh"`   // null when no refresh was needed
}

// Validation statuses, and the refresh statuses of CredentialRefreshed.
const (
	ValidationValid   = "valid"
	ValidationInvalid = "invalid"
	ValidationUnknown = "unknown"

	RefreshSucceeded      = "succeeded"
	RefreshFailed         = "failed"
	RefreshConnectError   = "connect_error"
	RefreshNoRefreshToken = "no_refresh_token"
)

// MCPProbe is the step of the MCP probe that failed ("initialize" or "tools/list") and the server's answer.
type MCPProbe struct {
	Method       string        `json:"method"`
	HTTPResponse *HTTPResponse `json:"http_response"`
}

// CredentialRefreshed is how a validation's refresh went, with the token endpoint's failing answer.
type CredentialRefreshed struct {
	Status       string        `json:"status"`
	HTTPResponse *HTTPResponse `json:"http_response"`
}

// HTTPResponse is a failing HTTP answer, its body scrubbed of secrets and maybe truncated.
type HTTPResponse struct {
	StatusCode    int    `json:"status_code"`
	ContentType   string `json:"content_type"`
	Body          string `json:"body"`
	BodyTruncated bool   `json:"body_truncated"`
}
