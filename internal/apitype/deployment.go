package apitype

import (
	"encoding/json"
	"time"
)

// ID prefixes of deployments and their runs.
const (
	PrefixDeployment    = "depl_"
	PrefixDeploymentRun = "drun_"
)

// Deployment is «Deployment»: a session factory that starts sessions of an agent in an environment, with
// resources, vaults, a budget and initial events, on a cron schedule and on demand.
type Deployment struct {
	Type          ObjectType        `json:"type"` // "deployment"
	ID            string            `json:"id"`
	Name          string            `json:"name"`
	Description   *string           `json:"description"`
	Agent         AgentRef          `json:"agent"`
	EnvironmentID string            `json:"environment_id"`
	InitialEvents []json.RawMessage `json:"initial_events"`
	// Resources are «ResourceConfig»s: the resources each run's session gets, without write-only tokens.
	Resources []json.RawMessage `json:"resources"`
	VaultIDs  []string          `json:"vault_ids"`
	Metadata  map[string]string `json:"metadata"`
	Schedule  *Schedule         `json:"schedule"`
	// Status is active or paused; an archived deployment reports active with archived_at set.
	Status       DeploymentStatus `json:"status"`
	PausedReason *PausedReason    `json:"paused_reason"`
	Budget       json.RawMessage  `json:"budget,omitempty"`
	CreatedAt    time.Time        `json:"created_at"`
	UpdatedAt    time.Time        `json:"updated_at"`
	ArchivedAt   *time.Time       `json:"archived_at"`
}

// AgentRef names an agent's version: a deployment's and a run's agent.
type AgentRef struct {
	Type    ObjectType `json:"type"` // "agent"
	ID      string     `json:"id"`
	Version int        `json:"version"`
	// Latest (not on the wire): the deployment follows the agent's latest version, which each run resolves;
	// Version is the latest when the deployment was last written.
	Latest bool `json:"-"`
}

// Schedule is «Schedule»: a 5-field cron expression in an IANA timezone.
type Schedule struct {
	Type       ScheduleType `json:"type"`
	Expression string       `json:"expression"`
	Timezone   string       `json:"timezone"`
	LastRunAt  *time.Time   `json:"last_run_at"`
	// UpcomingRunsAt are the next (at most 5) times; empty once archived or paused. The first is when the
	// deployment is due next.
	UpcomingRunsAt []time.Time `json:"upcoming_runs_at"`
}

// DeploymentStatus is a deployment's status.
type DeploymentStatus string

// Deployment statuses.
const (
	DeploymentActive DeploymentStatus = "active"
	DeploymentPaused DeploymentStatus = "paused"
)

// PausedReason is why a deployment is paused: by hand, or by a run error that would repeat.
type PausedReason struct {
	Type  PausedReasonType `json:"type"`
	Error *PausedError     `json:"error,omitempty"`
}

// PausedReasonType says why a deployment is paused.
type PausedReasonType string

// Paused reasons.
const (
	PausedByHand  PausedReasonType = "manual"
	PausedByError PausedReasonType = "error"
)

// ScheduleType is a schedule's type: cron is the one.
type ScheduleType string

// ScheduleCron is a 5-field cron expression in an IANA timezone.
const ScheduleCron ScheduleType = "cron"

// PausedError is the error of a paused_reason: only its type.
type PausedError struct {
	Type RunErrorType `json:"type"`
}

// DeploymentRun is «DeploymentRun»: one firing of a deployment, which created a session or failed.
type DeploymentRun struct {
	Type         ObjectType     `json:"type"` // "deployment_run"
	ID           string         `json:"id"`
	DeploymentID string         `json:"deployment_id"`
	Agent        AgentRef       `json:"agent"`
	SessionID    *string        `json:"session_id"`
	Error        *RunError      `json:"error"`
	Trigger      TriggerContext `json:"trigger_context"`
	CreatedAt    time.Time      `json:"created_at"`
}

// TriggerContext is what fired a run: the schedule at a time, or a manual run.
type TriggerContext struct {
	Type        TriggerType `json:"type"`
	ScheduledAt *time.Time  `json:"scheduled_at,omitempty"`
}

// TriggerType is a run's trigger_context.type.
type TriggerType string

// Trigger types.
const (
	TriggerSchedule TriggerType = "schedule"
	TriggerManual   TriggerType = "manual"
)

// RunError is why a run created no session.
type RunError struct {
	Type    RunErrorType `json:"type"`
	Message string       `json:"message"`
}

// RunErrorType is a run error's type.
type RunErrorType string

// Run error types (§2.14). RunScheduleMissed is Corral's own: scheduled times older than the catch-up window
// when the server came back, recorded on one run so that they are visible.
const (
	RunEnvironmentArchived  RunErrorType = "environment_archived_error"
	RunAgentArchived        RunErrorType = "agent_archived_error"
	RunEnvironmentNotFound  RunErrorType = "environment_not_found_error"
	RunVaultNotFound        RunErrorType = "vault_not_found_error"
	RunVaultArchived        RunErrorType = "vault_archived_error"
	RunFileNotFound         RunErrorType = "file_not_found_error"
	RunMemoryStoreArchived  RunErrorType = "memory_store_archived_error"
	RunSkillNotFound        RunErrorType = "skill_not_found_error"
	RunResourceNotFound     RunErrorType = "session_resource_not_found_error"
	RunRateLimited          RunErrorType = "session_rate_limited_error"
	RunCreationRejected     RunErrorType = "session_creation_rejected_error"
	RunUnknown              RunErrorType = "unknown_error"
	RunSelfHostedResources  RunErrorType = "self_hosted_resources_unsupported_error"
	RunMCPEgressBlocked     RunErrorType = "mcp_egress_blocked_error"
	RunScheduleMissed       RunErrorType = "schedule_missed_error"
	RunWorkspaceArchived    RunErrorType = "workspace_archived_error"
	RunOrganizationDisabled RunErrorType = "organization_disabled_error"
)

// Pauses reports whether a run error will repeat on every run until someone changes something, so that the
// deployment is paused with it: every error but a rate limit, a rejected creation, an unknown error and a
// missed schedule.
func (t RunErrorType) Pauses() bool {
	switch t {
	case RunRateLimited, RunCreationRejected, RunUnknown, RunScheduleMissed:
		return false
	}
	return true
}
