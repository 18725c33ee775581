package apitype

// The wire vocabulary: the closed sets of strings that the type discriminators and status fields of the
// Managed Agents API take. Each set has its own Go type, so that a value of one set cannot be used for
// another. A set whose values the API takes from a client as a plain choice has a Valid method; the others are
// checked where their values are decoded (each type's fields differ). They are string types: the JSON of a field
// of one of them is the JSON of the string.

// EnvironmentType is an environment config's type: where a session's tools run.
type EnvironmentType string

// Environment types.
const (
	EnvironmentCloud      EnvironmentType = "cloud"       // in Corral's own sandboxes
	EnvironmentSelfHosted EnvironmentType = "self_hosted" // by the client, which answers with user.tool_result
)

// Valid reports whether t is an environment type.
func (t EnvironmentType) Valid() bool { return t == EnvironmentCloud || t == EnvironmentSelfHosted }

// NetworkingType is a cloud environment's network policy.
type NetworkingType string

// Networking types.
const (
	NetworkingUnrestricted NetworkingType = "unrestricted"
	NetworkingLimited      NetworkingType = "limited" // only allowed_hosts (and, if allowed, MCP servers and package managers)
)

// ResourceType is a session resource's type.
type ResourceType string

// Resource types.
const (
	ResourceGitHubRepository ResourceType = "github_repository"
	ResourceFile             ResourceType = "file"
	ResourceMemoryStore      ResourceType = "memory_store"
)

// PermissionPolicyType decides whether a tool call runs, asks, or is refused.
type PermissionPolicyType string

// Permission policies.
const (
	PolicyAlwaysAllow PermissionPolicyType = "always_allow"
	PolicyAlwaysAsk   PermissionPolicyType = "always_ask"
	PolicyAuto        PermissionPolicyType = "auto"
)

// Valid reports whether t is a permission policy.
func (t PermissionPolicyType) Valid() bool {
	return t == PolicyAlwaysAllow || t == PolicyAlwaysAsk || t == PolicyAuto
}

// Permission is the evaluated_permission of an agent.tool_use: what its tool's policy decided.
type Permission string

// Evaluated permissions.
const (
	PermissionAllow Permission = "allow" // the call runs
	PermissionAsk   Permission = "ask"   // the call waits for a user.tool_confirmation
	PermissionDeny  Permission = "deny"  // the call is refused (an unknown or disabled tool)
)

// ConfirmationResult is the result of a user.tool_confirmation: the user's answer to a call that asked.
type ConfirmationResult string

// Confirmation results.
const (
	ConfirmAllow ConfirmationResult = "allow"
	ConfirmDeny  ConfirmationResult = "deny"
)

// Valid reports whether r is a confirmation result.
func (r ConfirmationResult) Valid() bool { return r == ConfirmAllow || r == ConfirmDeny }

// StopReasonType says why a session went idle (session.status_idle's stop_reason.type).
type StopReasonType string

// Stop reasons.
const (
	StopEndTurn          StopReasonType = "end_turn"
	StopRequiresAction   StopReasonType = "requires_action" // tool calls wait for the client: event_ids
	StopRetriesExhausted StopReasonType = "retries_exhausted"
	StopRefusal          StopReasonType = "refusal"
	StopBudgetReached    StopReasonType = "budget_reached" // the session's list cost reached its budget
)

// RetryStatusType says what follows a session.error (its error.retry_status.type).
type RetryStatusType string

// Retry statuses.
const (
	RetryStatusRetrying  RetryStatusType = "retrying"  // the step is retried
	RetryStatusExhausted RetryStatusType = "exhausted" // the turn is over: the session goes idle (retries_exhausted)
	RetryStatusTerminal  RetryStatusType = "terminal"  // the session cannot continue
)

// FailureComponent names the part of Corral a failure came from (a session.error's error.source.component, a
// failed tool result's or provisioning span's source, and a failed trace span's corral.failure.component).
type FailureComponent string

// Failure components.
const (
	ComponentModel  FailureComponent = "model"  // the model provider
	ComponentHands  FailureComponent = "hands"  // a sandbox backend, or a self-hosted worker
	ComponentProxy  FailureComponent = "proxy"  // the MCP or egress proxy, and the servers behind it
	ComponentStore  FailureComponent = "store"  // the durable log
	ComponentBrain  FailureComponent = "brain"  // the harness: a lost lease, a crash recovered
	ComponentClient FailureComponent = "client" // what the client sent
	ComponentAPI    FailureComponent = "api"    // the HTTP API server itself (an answer 5xx)
)

// FailureReason is a short machine word for why a part failed (a source's reason).
type FailureReason string

// Failure reasons.
const (
	ReasonSandboxDied         FailureReason = "sandbox_died"         // the sandbox died mid-call; its outcome is unknown
	ReasonLimitHit            FailureReason = "limit_hit"            // a sandbox limit (memory, processes) was reached
	ReasonTimeout             FailureReason = "timeout"              // no answer in time (a command, the model, an MCP call)
	ReasonUnavailable         FailureReason = "unavailable"          // the backend cannot run, or no hands are configured
	ReasonProvisionFailed     FailureReason = "provision_failed"     // a sandbox could not be started
	ReasonResourceUnavailable FailureReason = "resource_unavailable" // a session resource could not be placed
	ReasonOutputsFailed       FailureReason = "outputs_failed"       // the session's outputs could not be collected
	ReasonImageBuildFailed    FailureReason = "image_build_failed"   // the environment's image (its packages) could not be built
	ReasonWorkerLost          FailureReason = "worker_lost"          // a self-hosted worker vanished mid-call
	ReasonOverloaded          FailureReason = "overloaded"
	ReasonRateLimited         FailureReason = "rate_limited"
	ReasonServerError         FailureReason = "server_error"
	ReasonBadRequest          FailureReason = "bad_request" // the provider refused the request as invalid
	ReasonAuth                FailureReason = "auth"        // credentials refused or missing
	ReasonBilling             FailureReason = "billing"
	ReasonContextTooLong      FailureReason = "context_too_long"
	ReasonConnectionFailed    FailureReason = "connection_failed"
	ReasonLeaseLost           FailureReason = "lease_lost"      // another brain took the session over
	ReasonCrashRecovered      FailureReason = "crash_recovered" // a brain stopped mid-turn; another resumed from the log
	ReasonAppendFailed        FailureReason = "append_failed"
	ReasonBadInput            FailureReason = "bad_input"
	ReasonInternal            FailureReason = "internal"
)

// SessionErrorType is the type of a session.error's error (error.type), as the hosted service names it.
type SessionErrorType string

// Session error types.
const (
	SessionErrUnknown            SessionErrorType = "unknown_error"
	SessionErrModelOverloaded    SessionErrorType = "model_overloaded_error"
	SessionErrModelRateLimited   SessionErrorType = "model_rate_limited_error"
	SessionErrModelRequestFailed SessionErrorType = "model_request_failed_error"
	SessionErrMCPConnection      SessionErrorType = "mcp_connection_failed_error"
	SessionErrMCPAuthentication  SessionErrorType = "mcp_authentication_failed_error"
	SessionErrBilling            SessionErrorType = "billing_error"
	// The repository resource errors: a repository that could not be placed in the workspace.
	SessionErrRepositoryClone          SessionErrorType = "repository_clone_error"
	SessionErrRepositoryCheckout       SessionErrorType = "repository_checkout_error"
	SessionErrRepositoryAuthentication SessionErrorType = "repository_authentication_error" // the remote refused the token (401)
	SessionErrRepositoryForbidden      SessionErrorType = "repository_forbidden_error"      // the token may not read it (403)
	SessionErrRepositoryNotFound       SessionErrorType = "repository_not_found_error"      // no such repository (404)
	// SessionErrEnvironmentBuild is Corral's: the environment's image (its packages) failed to build, so the
	// session's tools cannot run; the message names the package and why.
	SessionErrEnvironmentBuild SessionErrorType = "environment_build_failed_error"
)

// Valid reports whether t is a session error type.
func (t SessionErrorType) Valid() bool {
	switch t {
	case SessionErrUnknown, SessionErrModelOverloaded, SessionErrModelRateLimited, SessionErrModelRequestFailed,
		SessionErrMCPConnection, SessionErrMCPAuthentication, SessionErrBilling, SessionErrRepositoryClone,
		SessionErrRepositoryCheckout, SessionErrRepositoryAuthentication, SessionErrRepositoryForbidden,
		SessionErrRepositoryNotFound, SessionErrEnvironmentBuild:
		return true
	}
	return false
}

// SkillSourceType says where a skill comes from: a skill's source.type, and an agent's skills[].type.
type SkillSourceType string

// Skill sources.
const (
	SkillSourceCustom    SkillSourceType = "custom"    // uploaded to this server (POST /v1/skills)
	SkillSourceAnthropic SkillSourceType = "anthropic" // Anthropic's pre-built skills, which this server does not have
)

// Valid reports whether t is a skill source.
func (t SkillSourceType) Valid() bool { return t == SkillSourceCustom || t == SkillSourceAnthropic }

// PackagesType is the type of an environment's packages (config.packages.type): it has one value.
type PackagesType string

// PackagesList is the one packages type: package lists per package manager.
const PackagesList PackagesType = "packages"

// Valid reports whether t is a packages type.
func (t PackagesType) Valid() bool { return t == PackagesList }

// FileScopeType is what a file was created in (a file's scope.type).
type FileScopeType string

// File scopes.
const (
	FileScopeSession FileScopeType = "session" // a session's outputs
)

// Valid reports whether t is a file scope type.
func (t FileScopeType) Valid() bool { return t == FileScopeSession }

// ResourceAccess is how a memory_store resource is mounted (its access); the default is read_write.
type ResourceAccess string

// Resource access modes.
const (
	AccessReadWrite ResourceAccess = "read_write"
	AccessReadOnly  ResourceAccess = "read_only"
)

// Valid reports whether a is a resource access mode.
func (a ResourceAccess) Valid() bool { return a == AccessReadWrite || a == AccessReadOnly }

// ObjectType is the type of an API object: the one value a resource's type field always holds ("agent" for an
// agent, "session" for a session, ...), and so also what a work item's data.type names (the kind of object the
// item is for: a session) and an error response's type ("error").
type ObjectType string

// Object types.
const (
	ObjectAgent                ObjectType = "agent" // an agent, and a session's snapshot of it
	ObjectSession              ObjectType = "session"
	ObjectEnvironment          ObjectType = "environment"
	ObjectEnvironmentKey       ObjectType = "environment_key"
	ObjectFile                 ObjectType = "file"
	ObjectSkill                ObjectType = "skill"
	ObjectSkillVersion         ObjectType = "skill_version"
	ObjectVault                ObjectType = "vault"
	ObjectCredential           ObjectType = "vault_credential"
	ObjectCredentialValidation ObjectType = "vault_credential_validation"
	ObjectWork                 ObjectType = "work"
	ObjectWorkHeartbeat        ObjectType = "work_heartbeat"
	ObjectOutcomeEvaluation    ObjectType = "outcome_evaluation"
	ObjectSessionThread        ObjectType = "session_thread"
	ObjectWorkQueueStats       ObjectType = "work_queue_stats"
	ObjectModel                ObjectType = "model" // a model of GET /v1/models
	ObjectMemoryStore          ObjectType = "memory_store"
	ObjectMemory               ObjectType = "memory"
	ObjectMemoryPrefix         ObjectType = "memory_prefix" // a list item rolling up the memories under a path
	ObjectMemoryVersion        ObjectType = "memory_version"
	ObjectDream                ObjectType = "dream"
	ObjectDeployment           ObjectType = "deployment"
	ObjectDeploymentRun        ObjectType = "deployment_run"
	ObjectWebhookEndpoint      ObjectType = "webhook_endpoint"
	ObjectTunnel               ObjectType = "tunnel"
	ObjectTunnelToken          ObjectType = "tunnel_token"
	ObjectTunnelCertificate    ObjectType = "tunnel_certificate"
	ObjectEvent                ObjectType = "event" // the envelope of a webhook's payload
	ObjectError                ObjectType = "error" // the envelope of an error response
)

// EventType is the type of a session event (user.message, agent.tool_use, ...; event.go lists them), and of
// the stream-only frames that preview one (event_start, event_delta): a stream's frames share one type field.
type EventType string

// ErrorType is the type of an API error (an error response's error.type), as the Anthropic error envelope
// names it.
type ErrorType string

// ContentBlockType is the type of a content block of a message or a tool result.
type ContentBlockType string

// Content block types.
const (
	ContentText         ContentBlockType = "text"
	ContentImage        ContentBlockType = "image"
	ContentDocument     ContentBlockType = "document"
	ContentSearchResult ContentBlockType = "search_result"
	ContentRedacted     ContentBlockType = "redacted" // a placeholder for content the client withheld
)

// SourceType is the type of an image or document block's source (ImageSource.Type); text is a document's only.
type SourceType string

// Source types.
const (
	SourceBase64 SourceType = "base64"
	SourceText   SourceType = "text" // plain text, of a document block
	SourceURL    SourceType = "url"
	SourceFile   SourceType = "file" // a file of the Files API, by file_id
)

// DeltaType is the type of an event_delta's delta: it has one value.
type DeltaType string

// DeltaContent is the one delta type: a fragment of one content block of the previewed message.
const DeltaContent DeltaType = "content_delta"

// EffortType is a model's reasoning effort (model.effort.type).
type EffortType string

// Efforts.
const (
	EffortLow    EffortType = "low"
	EffortMedium EffortType = "medium"
	EffortHigh   EffortType = "high"
	EffortXHigh  EffortType = "xhigh"
	EffortMax    EffortType = "max"
)

// Valid reports whether t is an effort.
func (t EffortType) Valid() bool {
	switch t {
	case EffortLow, EffortMedium, EffortHigh, EffortXHigh, EffortMax:
		return true
	}
	return false
}

// ExecutionIdentityType is whom an agent acts as (execution_identity.type).
type ExecutionIdentityType string

// Execution identities.
const (
	IdentityServiceAccount ExecutionIdentityType = "service_account" // the default
	IdentityAWSRole        ExecutionIdentityType = "aws_role"        // an AWS role, by role_arn
)

// ToolType is the type of an entry of an agent's tools.
type ToolType string

// Tool types.
const (
	ToolTypeAgentToolset ToolType = "agent_toolset_20260401" // the built-in tools (BuiltinTools)
	ToolTypeMCPToolset   ToolType = "mcp_toolset"            // the tools of one of the agent's MCP servers
	ToolTypeCustom       ToolType = "custom"                 // a tool the client runs
)

// BuiltinToolType is the type of a built-in tool's config (an agent_toolset_20260401 tool's configs[].type):
// the tool's name, one of BuiltinTools. The configs of an MCP toolset have none (the field is omitted).
type BuiltinToolType string

// MCPServerType is the type of an agent's MCP server: it has one value.
type MCPServerType string

// MCPServerURL is the one MCP server type: a remote server at a URL (streamable HTTP).
const MCPServerURL MCPServerType = "url"

// CredentialAuthType is the type of a vault credential's auth.
type CredentialAuthType string

// Credential auth types.
const (
	AuthMCPOAuth            CredentialAuthType = "mcp_oauth"            // an MCP server's OAuth tokens, refreshed
	AuthStaticBearer        CredentialAuthType = "static_bearer"        // a fixed bearer token for an MCP server
	AuthEnvironmentVariable CredentialAuthType = "environment_variable" // a secret the sandbox sees as a placeholder
)

// TokenEndpointAuthType says how an mcp_oauth credential's client authenticates to its token endpoint.
type TokenEndpointAuthType string

// Token endpoint auth types.
const (
	TokenAuthNone              TokenEndpointAuthType = "none"
	TokenAuthClientSecretBasic TokenEndpointAuthType = "client_secret_basic"
	TokenAuthClientSecretPost  TokenEndpointAuthType = "client_secret_post"
)

// BudgetType is the type of a session budget: "limit" is the only one.
type BudgetType string

// BudgetLimit is a hard cap on the session's list cost.
const BudgetLimit BudgetType = "limit"

// DreamStatus is where a dream is in its lifecycle.
type DreamStatus string

// Dream statuses: completed, failed and canceled are terminal.
const (
	DreamPending   DreamStatus = "pending"
	DreamRunning   DreamStatus = "running"
	DreamCompleted DreamStatus = "completed"
	DreamFailed    DreamStatus = "failed"
	DreamCanceled  DreamStatus = "canceled"
)

// Valid reports whether s is a dream status.
func (s DreamStatus) Valid() bool {
	switch s {
	case DreamPending, DreamRunning, DreamCompleted, DreamFailed, DreamCanceled:
		return true
	}
	return false
}

// Terminal reports whether a dream with this status has ended: its status does not change again.
func (s DreamStatus) Terminal() bool {
	return s == DreamCompleted || s == DreamFailed || s == DreamCanceled
}

// DreamInputType is the kind of a dream's input.
type DreamInputType string

// Dream inputs.
const (
	DreamInputMemoryStore DreamInputType = "memory_store"
	DreamInputSessions    DreamInputType = "sessions"
)

// DreamOutputBehaviorType says which memory store a dream writes.
type DreamOutputBehaviorType string

// Dream output behaviors.
const (
	DreamCreateNew      DreamOutputBehaviorType = "create_new"      // a new store, a copy of the input's memories
	DreamUpdateExisting DreamOutputBehaviorType = "update_existing" // the input store itself
)

// DreamErrorType is why a dream failed (its error.type).
type DreamErrorType string

// Dream error types.
const (
	DreamErrTimeout         DreamErrorType = "timeout"                  // it ran longer than the server's limit
	DreamErrInternal        DreamErrorType = "internal_error"           // its session was lost, or the model unreachable
	DreamErrSessionFailed   DreamErrorType = "session_error"            // its session terminated or stopped otherwise
	DreamErrInputNotFound   DreamErrorType = "input_not_found_error"    // its memory store was deleted before it started
	DreamErrInputArchived   DreamErrorType = "input_archived_error"     // the store it updates was archived
	DreamErrSessionsMissing DreamErrorType = "sessions_not_found_error" // input sessions were deleted before it read them
)
