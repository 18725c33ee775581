package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/cron"
	"github.com/corralhq/corral/internal/store"
)

// The deployment runner fires the scheduled times of deployments on the fleet's leader. Exactly once is the
// store's: DeploymentFire claims a time conditionally on the deployment still being due at it, so two runners
// (a leader and one that lost its lease, or two processes in a split) cannot both fire it. A run is created
// pending and carried out at once; a run a crash left pending is carried out again by the next pass (its
// session's id derives from the run's, so a session made before the crash is found, not made twice).

// Deployment runner defaults.
const (
	// DeploymentPollInterval is how often the runner looks for due deployments and pending runs.
	DeploymentPollInterval = time.Second
	// DefaultCatchUp is how old a scheduled time missed while no server ran may be and still fire when one
	// comes back (Config.DeploymentCatchUp).
	DefaultCatchUp = time.Hour
	// pendingRunGrace is how long a pending run is left to the process that created it before the runner
	// carries it out itself: a manual run's handler or a firing runner that died.
	pendingRunGrace = 30 * time.Second
	// maxMissedCount bounds how many missed times one firing counts.
	maxMissedCount = 100_000
)

// RunDeployments fires the deployments due now and carries out the runs a crash left pending. Errors of one
// deployment do not stop the others; the first is returned.
func (s *Server) RunDeployments(ctx context.Context) error {
	now := s.now()
	due, err := s.store.DeploymentListDue(ctx, now, 100)
	if err != nil {
		return fmt.Errorf("deployments: list due: %w", err)
	}
	var first error
	for i := range due {
		if err := s.fireDeployment(ctx, &due[i], now); err != nil {
			s.log.Warn("deployment firing failed", "deployment", due[i].Deployment.ID, "err", err)
			first = firstErr(first, err)
		}
	}
	pending, err := s.store.DeploymentRunListPending(ctx, now.Add(-pendingRunGrace), 20)
	if err != nil {
		return firstErr(first, fmt.Errorf("deployments: list pending runs: %w", err))
	}
	for i := range pending {
		if _, err := s.carryOutRun(ctx, &pending[i]); err != nil {
			s.log.Warn("deployment run failed", "run", pending[i].ID, "err", err)
			first = firstErr(first, err)
		}
	}
	return first
}

// fireDeployment claims the times a due deployment missed up to now and runs the latest of them if it is
// within the catch-up window: a deployment fires at most once per pass, however many times it missed (like
// anacron: a burst of sessions at a restart helps nobody). Missed times it does not run are recorded on one
// run with a schedule_missed_error, so that they are visible.
func (s *Server) fireDeployment(ctx context.Context, rec *store.DeploymentRecord, now time.Time) error {
	d := &rec.Deployment
	ctx, open, err := s.inWorkspaceOf(ctx, d.ID)
	if err != nil || !open {
		return err
	}
	next := store.DeploymentNextRun(rec)
	if next == nil {
		return nil
	}
	sched, err := cron.Parse(d.Schedule.Expression, d.Schedule.Timezone)
	if err != nil {
		return fmt.Errorf("stored schedule: %w", err)
	}
	times := append([]time.Time{*next}, sched.Between(*next, now, maxMissedCount)...)
	latest := times[len(times)-1]
	missed := times
	var runs []apitype.DeploymentRun
	if now.Sub(latest) <= s.catchUp {
		missed = times[:len(times)-1]
	}
	if n := len(missed); n > 0 {
		last := missed[n-1]
		count := fmt.Sprint(n)
		if n == maxMissedCount+1 {
			count = "more than " + fmt.Sprint(maxMissedCount)
		}
		runs = append(runs, s.newScheduledRun(d, last, &apitype.RunError{Type: apitype.RunScheduleMissed,
			Message: fmt.Sprintf("%s scheduled time(s) from %s to %s were missed while no server ran; only a time less than %s old fires when one comes back",
				count, missed[0].Format(time.RFC3339), last.Format(time.RFC3339), s.catchUp)}))
	}
	var fire *apitype.DeploymentRun
	if len(missed) < len(times) {
		runs = append(runs, s.newScheduledRun(d, latest, nil))
		fire = &runs[len(runs)-1]
	}
	_, err = s.store.DeploymentFire(ctx, &store.DeploymentFireParams{DeploymentID: d.ID, ScheduledAt: *next,
		LastRunAt: latest, Upcoming: sched.Upcoming(now, upcomingRuns), Runs: runs})
	if errors.Is(err, store.ErrConflict) {
		return nil // another runner fired it, or the deployment changed: the next pass sees it as it is
	}
	if err != nil {
		return err
	}
	if len(missed) > 0 {
		s.emitWebhookOnce(ctx, "deployment_run.failed", runs[0].ID)
	}
	if fire == nil {
		return nil
	}
	_, err = s.carryOutRun(ctx, fire)
	return err
}

func (s *Server) newScheduledRun(d *apitype.Deployment, at time.Time, runErr *apitype.RunError) apitype.DeploymentRun {
	at = at.UTC()
	return apitype.DeploymentRun{Type: apitype.ObjectDeploymentRun, ID: apitype.NewID(apitype.PrefixDeploymentRun),
		DeploymentID: d.ID, Agent: d.Agent, Error: runErr,
		Trigger: apitype.TriggerContext{Type: apitype.TriggerSchedule, ScheduledAt: &at}, CreatedAt: s.now()}
}

// carryOutRun creates a pending run's session, records the outcome (the session, or a typed error) and pauses
// the deployment on an error that would repeat. It is idempotent: a run resolved meanwhile is returned as
// resolved.
func (s *Server) carryOutRun(ctx context.Context, run *apitype.DeploymentRun) (*apitype.DeploymentRun, error) {
	ctx, _, err := s.inWorkspaceOf(ctx, run.DeploymentID)
	if err != nil {
		return nil, err
	}
	s.emitWebhookOnce(ctx, "deployment_run.started", run.ID)
	out := *run
	sess, runErr := s.runSession(ctx, &out)
	if runErr != nil {
		out.Error = runErr
	} else {
		out.SessionID = &sess.ID
	}
	done, err := s.store.DeploymentRunResolve(ctx, &out)
	if errors.Is(err, store.ErrConflict) && done != nil {
		return done, nil // resolved by another runner
	}
	if err != nil {
		return nil, fmt.Errorf("deployment run %s: record its outcome: %w", run.ID, err)
	}
	if done.Error != nil {
		s.emitWebhookOnce(ctx, "deployment_run.failed", done.ID)
		if done.Error.Type.Pauses() {
			s.pauseOnError(ctx, done.DeploymentID, done.Error.Type)
		}
	} else {
		s.emitWebhookOnce(ctx, "deployment_run.succeeded", done.ID)
	}
	return done, nil
}

// pauseOnError pauses a deployment with the error of its run, unless it is paused or archived already.
func (s *Server) pauseOnError(ctx context.Context, id string, typ apitype.RunErrorType) {
	paused := false
	now := s.now()
	_, err := s.store.DeploymentUpdate(ctx, id, func(rec *store.DeploymentRecord) error {
		d := &rec.Deployment
		if d.ArchivedAt != nil || d.Status == apitype.DeploymentPaused {
			return nil
		}
		d.Status, d.UpdatedAt, paused = apitype.DeploymentPaused, now, true
		d.PausedReason = &apitype.PausedReason{Type: apitype.PausedByError, Error: &apitype.PausedError{Type: typ}}
		return reschedule(d, now)
	})
	if err != nil {
		s.log.Warn("pause deployment on a run error", "deployment", id, "err", err)
		return
	}
	if paused {
		s.emitWebhook(ctx, "deployment.paused", id)
	}
}

// runSession creates the session of a run from its deployment as it is now, or says why it cannot: a typed
// run error. The run's agent becomes the version the session runs.
func (s *Server) runSession(ctx context.Context, run *apitype.DeploymentRun) (*apitype.Session, *apitype.RunError) {
	ctx, open, err := s.inWorkspaceOf(ctx, run.DeploymentID)
	if err != nil {
		return nil, runError(apitype.RunUnknown, "deployment %s: %v", run.DeploymentID, err)
	}
	if !open {
		return nil, runError(apitype.RunUnknown, "the workspace of deployment %s is archived", run.DeploymentID)
	}
	rec, err := s.store.DeploymentGet(ctx, run.DeploymentID)
	if err != nil {
		return nil, runError(apitype.RunUnknown, "deployment %s: %v", run.DeploymentID, err)
	}
	sessID := derivedID(apitype.PrefixSession, run.ID)
	if sess, err := s.store.SessionGet(ctx, sessID); err == nil {
		run.Agent = apitype.AgentRef{Type: apitype.ObjectAgent, ID: sess.Agent.ID, Version: sess.Agent.Version}
		return sess, nil // made before a crash
	}
	d := &rec.Deployment
	if re := s.checkRunTargets(ctx, rec); re != nil {
		return nil, re
	}
	agent := d.Agent
	if rec.AgentLatest {
		agent.Version = 0
	}
	a, err := s.store.AgentGet(ctx, &store.AgentGetParams{ID: agent.ID, Version: agent.Version})
	if err != nil {
		return nil, runError(apitype.RunResourceNotFound, "agent %s: %v", agent.ID, err)
	}
	if a.ArchivedAt != nil {
		return nil, runError(apitype.RunAgentArchived, "agent %s is archived", a.ID)
	}
	run.Agent = apitype.AgentRef{Type: apitype.ObjectAgent, ID: a.ID, Version: a.Version}
	ref, err := json.Marshal(map[string]any{"type": "agent", "id": a.ID, "version": a.Version})
	if err != nil {
		return nil, runError(apitype.RunUnknown, "%v", err)
	}
	initial := make([]apitype.NewEvent, 0, len(d.InitialEvents))
	for i, raw := range d.InitialEvents {
		ce, err := parseClientEvent(index("initial_events", i), raw, deploymentEventTypes)
		if err == nil {
			err = s.resolveRubric(ctx, ce.path, &ce.ev)
		}
		if err != nil {
			return nil, runError(apitype.RunFileNotFound, "%v", err)
		}
		initial = append(initial, ce.ev)
	}
	tokens := map[int]*store.SealedSecret{}
	for i := range rec.Tokens {
		t := &rec.Tokens[i]
		var idx int
		if _, err := fmt.Sscanf(t.Name, SecretAuthorizationToken+"/%d", &idx); err == nil {
			tokens[idx] = t
		}
	}
	req := &sessionCreateRequest{Agent: ref, EnvironmentID: d.EnvironmentID, Resources: d.Resources,
		VaultIDs: d.VaultIDs, Budget: d.Budget, Metadata: map[string]string{"deployment_id": d.ID, "deployment_run_id": run.ID}}
	sess, err := s.createSession(ctx, req, initial, &sessionOrigin{DeploymentID: d.ID, RunID: run.ID, Tokens: tokens})
	if err != nil {
		if errors.Is(err, store.ErrConflict) {
			if sess, gerr := s.store.SessionGet(ctx, derivedID(apitype.PrefixSession, run.ID)); gerr == nil {
				return sess, nil // made by another runner meanwhile
			}
		}
		var ae *apiError
		if errors.As(err, &ae) {
			return nil, runError(apitype.RunCreationRejected, "%s", ae.msg)
		}
		return nil, runError(apitype.RunUnknown, "%v", err)
	}
	return sess, nil
}

// checkRunTargets checks what a run's session needs, and names what is missing or archived with its run
// error type: the environment, the vaults, the files, the memory stores; and that a self-hosted environment
// gets no file or repository resources.
func (s *Server) checkRunTargets(ctx context.Context, rec *store.DeploymentRecord) *apitype.RunError {
	d := &rec.Deployment
	env, err := s.store.EnvironmentGet(ctx, d.EnvironmentID)
	if errors.Is(err, store.ErrNotFound) {
		return runError(apitype.RunEnvironmentNotFound, "environment %s does not exist", d.EnvironmentID)
	}
	if err != nil {
		return runError(apitype.RunUnknown, "environment %s: %v", d.EnvironmentID, err)
	}
	if env.ArchivedAt != nil {
		return runError(apitype.RunEnvironmentArchived, "environment %s is archived", env.ID)
	}
	for _, id := range d.VaultIDs {
		v, err := s.store.VaultGet(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return runError(apitype.RunVaultNotFound, "vault %s does not exist", id)
		}
		if err != nil {
			return runError(apitype.RunUnknown, "vault %s: %v", id, err)
		}
		if v.ArchivedAt != nil {
			return runError(apitype.RunVaultArchived, "vault %s is archived", id)
		}
	}
	for _, raw := range d.Resources {
		var res struct {
			Type          apitype.ResourceType `json:"type"`
			FileID        string               `json:"file_id"`
			MemoryStoreID string               `json:"memory_store_id"`
		}
		if err := json.Unmarshal(raw, &res); err != nil {
			return runError(apitype.RunUnknown, "stored resource: %v", err)
		}
		if env.Config.Type == apitype.EnvironmentSelfHosted && res.Type != apitype.ResourceMemoryStore {
			return runError(apitype.RunSelfHostedResources,
				"environment %s is self-hosted: its sessions cannot have %s resources", env.ID, res.Type)
		}
		switch res.Type {
		case apitype.ResourceFile:
			if _, err := s.store.FileGet(ctx, res.FileID); errors.Is(err, store.ErrNotFound) {
				return runError(apitype.RunFileNotFound, "file %s does not exist", res.FileID)
			}
		case apitype.ResourceMemoryStore:
			m, err := s.store.MemoryStoreGet(ctx, res.MemoryStoreID)
			if errors.Is(err, store.ErrNotFound) {
				return runError(apitype.RunResourceNotFound, "memory store %s does not exist", res.MemoryStoreID)
			}
			if err == nil && m.ArchivedAt != nil {
				return runError(apitype.RunMemoryStoreArchived, "memory store %s is archived", m.ID)
			}
		}
	}
	return nil
}

func runError(typ apitype.RunErrorType, format string, args ...any) *apitype.RunError {
	return &apitype.RunError{Type: typ, Message: fmt.Sprintf(format, args...)}
}

// emitWebhook records a webhook event about a resource just written. It follows the write rather than
// sharing its transaction: a process killed between the two loses the event (the session log's events are
// recorded in the log's own transactions and are never lost). A failure is logged: the write stands.
func (s *Server) emitWebhook(ctx context.Context, typ apitype.WebhookEventType, id string) {
	s.recordWebhook(ctx, typ, id, "")
}

// emitWebhookOnce is emitWebhook for an event that happens once per object (a run's start and outcome): its
// id derives from the object's, so a step redone after a crash tells it once.
func (s *Server) emitWebhookOnce(ctx context.Context, typ apitype.WebhookEventType, id string) {
	s.recordWebhook(ctx, typ, id, id)
}

// emitCredentialWebhook is emitWebhook for a vault credential: the event's data names its vault too.
func (s *Server) emitCredentialWebhook(ctx context.Context, typ apitype.WebhookEventType, vaultID, id string) {
	ev := apitype.NewWebhookEvent(typ, id, "", s.now())
	ev.Data.VaultID = vaultID
	s.appendWebhook(ctx, ev)
}

func (s *Server) recordWebhook(ctx context.Context, typ apitype.WebhookEventType, id, key string) {
	s.appendWebhook(ctx, apitype.NewWebhookEvent(typ, id, key, s.now()))
}

func (s *Server) appendWebhook(ctx context.Context, ev apitype.WebhookEvent) {
	if ws := ctxWorkspace(ctx); ws != "" {
		ev.Data.WorkspaceID = ws // the fan-out gives it to this workspace's endpoints alone
	}
	typ, id := ev.Data.Type, ev.Data.ID
	if err := s.store.WebhookEventAppend(context.WithoutCancel(ctx), []apitype.WebhookEvent{ev}); err != nil {
		s.log.Warn("record webhook event", "type", typ, "id", id, "err", err)
	}
}
