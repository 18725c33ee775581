package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/apitype"
)

// DeploymentStore keeps deployments and their runs.
//
// A scheduled time fires exactly once however many processes share the store: DeploymentFire claims it in one
// transaction, conditional on the deployment still being due at that time, and a run's (deployment, scheduled
// time) pair is unique. A run is created pending (no session, no error) and resolved once its session exists
// or it failed; lists and gets leave pending runs out unless asked, so that a client only ever sees a run with
// exactly one of session_id and error.
type DeploymentStore interface {
	// DeploymentCreate stores a new deployment; ErrConflict if the id exists.
	DeploymentCreate(ctx context.Context, d *DeploymentRecord) error
	// DeploymentGet returns a deployment, archived or not; ErrNotFound if there is none.
	DeploymentGet(ctx context.Context, id string) (*DeploymentRecord, error)
	// DeploymentUpdate reads the deployment, applies fn and writes the result, atomically (the Update rule;
	// KeepDeployment).
	DeploymentUpdate(ctx context.Context, id string, fn func(*DeploymentRecord) error) (*DeploymentRecord, error)
	// DeploymentList lists deployments by (created_at, id) with p's filters.
	DeploymentList(ctx context.Context, p *DeploymentListParams) ([]DeploymentRecord, error)
	// DeploymentListDue lists the deployments due at now (DeploymentNextRun <= now), soonest first, at most
	// limit (0: all).
	DeploymentListDue(ctx context.Context, now time.Time, limit int) ([]DeploymentRecord, error)
	// DeploymentFire claims the times a deployment is due at, in one transaction: it must still be due next at
	// p.ScheduledAt (DeploymentNextRun == p.ScheduledAt, else ErrConflict: another process fired it, or it
	// changed); its schedule's last_run_at becomes p.LastRunAt and upcoming_runs_at p.Upcoming; p.Runs (scheduled
	// runs of the deployment: the pending run that fires, and a resolved one recording missed times) are created.
	// A run with the same (deployment, scheduled_at) as another gives ErrConflict.
	DeploymentFire(ctx context.Context, p *DeploymentFireParams) (*DeploymentRecord, error)

	// DeploymentRunCreate stores a new run (pending or resolved); ErrConflict if the id exists, or a run of the
	// deployment has the same scheduled time.
	DeploymentRunCreate(ctx context.Context, r *apitype.DeploymentRun) error
	// DeploymentRunGet returns a run, pending or not (DeploymentRunPending says which); ErrNotFound if none.
	DeploymentRunGet(ctx context.Context, id string) (*apitype.DeploymentRun, error)
	// DeploymentRunResolve records the outcome of a pending run: exactly one of r.SessionID and r.Error must be
	// set. ErrConflict if the run is not pending (it was resolved before: the stored run is returned with it).
	DeploymentRunResolve(ctx context.Context, r *apitype.DeploymentRun) (*apitype.DeploymentRun, error)
	// DeploymentRunList lists runs by (created_at, id) with p's filters; pending runs only with
	// p.IncludePending.
	DeploymentRunList(ctx context.Context, p *DeploymentRunListParams) ([]apitype.DeploymentRun, error)
	// DeploymentRunListPending lists the pending runs created at or before before, oldest first, at most limit
	// (0: all): the runs a crash left unresolved.
	DeploymentRunListPending(ctx context.Context, before time.Time, limit int) ([]apitype.DeploymentRun, error)
}

// DeploymentRecord is a deployment as stored: what the API shows, and what it does not.
type DeploymentRecord struct {
	Deployment apitype.Deployment `json:"deployment"`
	// AgentLatest: the deployment runs its agent's latest version (it was given the agent's id alone).
	AgentLatest bool `json:"agent_latest,omitempty"`
	// Tokens are the sealed authorization_tokens of the github_repository resources, by index in
	// Deployment.Resources (SealedSecret.Name is the index); each run seals them anew for its session.
	Tokens []SealedSecret `json:"tokens,omitempty"`
}

// DeploymentListParams filters and pages deployments.
type DeploymentListParams struct {
	ListParams
	AgentID string
	// Status keeps the deployments with this status ("" all); archived ones report active, and are listed
	// only with IncludeArchived.
	Status apitype.DeploymentStatus
}

// DeploymentFireParams fires a scheduled time of a deployment.
type DeploymentFireParams struct {
	DeploymentID string
	ScheduledAt  time.Time // the deployment's DeploymentNextRun, which the fire claims
	LastRunAt    time.Time
	Upcoming     []time.Time
	Runs         []apitype.DeploymentRun
}

// DeploymentRunListParams filters and pages runs.
type DeploymentRunListParams struct {
	ListParams
	DeploymentID   string
	HasError       *bool
	TriggerType    apitype.TriggerType
	IncludePending bool
}

// DeploymentNextRun is when a deployment is due next: the first of its upcoming runs, if it is active, not
// archived and scheduled; else nil. Adapters keep it in an indexed column.
func DeploymentNextRun(d *DeploymentRecord) *time.Time {
	dep := &d.Deployment
	if dep.Status != apitype.DeploymentActive || dep.ArchivedAt != nil || dep.Schedule == nil ||
		len(dep.Schedule.UpcomingRunsAt) == 0 {
		return nil
	}
	t := dep.Schedule.UpcomingRunsAt[0].UTC()
	return &t
}

// KeepDeployment is what DeploymentUpdate keeps of the deployment read: its id and creation, an archive (an
// archived deployment stays archived), and its schedule's last run (DeploymentFire's).
func KeepDeployment(next, cur *DeploymentRecord) {
	n, c := &next.Deployment, &cur.Deployment
	n.ID, n.CreatedAt, n.Type = c.ID, c.CreatedAt, c.Type
	if c.ArchivedAt != nil {
		n.ArchivedAt = c.ArchivedAt
	}
	if n.Schedule != nil && c.Schedule != nil && n.Schedule.LastRunAt == nil {
		n.Schedule.LastRunAt = c.Schedule.LastRunAt
	}
}

// ScheduledAt is a run's scheduled time: its trigger's, for a scheduled run; nil for a manual one.
func ScheduledAt(r *apitype.DeploymentRun) *time.Time {
	if r.Trigger.Type != apitype.TriggerSchedule || r.Trigger.ScheduledAt == nil {
		return nil
	}
	t := r.Trigger.ScheduledAt.UTC()
	return &t
}

// RunPending reports whether a run has no outcome yet.
func RunPending(r *apitype.DeploymentRun) bool { return r.SessionID == nil && r.Error == nil }

// CheckRunResolved is what adapters check of a resolution: exactly one of session and error.
func CheckRunResolved(r *apitype.DeploymentRun) error {
	if (r.SessionID == nil) == (r.Error == nil) {
		return fmt.Errorf("deployment run %s: exactly one of session_id and error must be set", r.ID)
	}
	return nil
}

// ResolvedRun is the run DeploymentRunResolve stores: the stored pending run cur with r's outcome and, if r names
// an agent, r's agent (the version the run's session was created with, for a deployment that follows its
// agent's latest). The run's identity, trigger and creation stay the store's.
func ResolvedRun(cur, r *apitype.DeploymentRun) *apitype.DeploymentRun {
	next := *cur
	next.SessionID, next.Error = r.SessionID, r.Error
	if r.Agent.ID != "" {
		next.Agent = r.Agent
	}
	return &next
}

// CheckFire is what adapters check of a DeploymentFire before they write.
func CheckFire(p *DeploymentFireParams) error {
	if len(p.Runs) == 0 {
		return errors.New("deployment fire: no run")
	}
	for i := range p.Runs {
		r := &p.Runs[i]
		if r.DeploymentID != p.DeploymentID || ScheduledAt(r) == nil {
			return fmt.Errorf("deployment fire: run %s is not a scheduled run of %s", r.ID, p.DeploymentID)
		}
	}
	return nil
}
