package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/cron"
	"github.com/corralhq/corral/internal/store"
)

// Deployments (§2.14): session factories that start sessions of an agent on a cron schedule and on demand. The
// handlers here keep deployments and fire manual runs; the runner (deployrun.go) fires the scheduled ones.

// Deployment limits, as the API documents them.
const (
	maxDeploymentResources = 500
	maxDeploymentVaults    = 50
	maxRunListLimit        = 1000
	upcomingRuns           = 5
)

type deploymentCreateRequest struct {
	Name          *string           `json:"name"`
	Description   *string           `json:"description"`
	Agent         json.RawMessage   `json:"agent"`
	EnvironmentID *string           `json:"environment_id"`
	InitialEvents []json.RawMessage `json:"initial_events"`
	Resources     []json.RawMessage `json:"resources"`
	VaultIDs      []string          `json:"vault_ids"`
	Budget        json.RawMessage   `json:"budget"`
	Schedule      json.RawMessage   `json:"schedule"`
	Metadata      map[string]string `json:"metadata"`
}

type deploymentUpdateRequest struct {
	Name          *string                     `json:"name"`
	Description   nullable[string]            `json:"description"`
	Agent         json.RawMessage             `json:"agent"`
	EnvironmentID *string                     `json:"environment_id"`
	InitialEvents nullable[[]json.RawMessage] `json:"initial_events"`
	Resources     nullable[[]json.RawMessage] `json:"resources"`
	VaultIDs      nullable[[]string]          `json:"vault_ids"`
	Budget        nullable[json.RawMessage]   `json:"budget"`
	Schedule      nullable[json.RawMessage]   `json:"schedule"`
	Metadata      map[string]*string          `json:"metadata"`
}

// viewDeployment is a deployment as the API shows it: lists never null.
func viewDeployment(rec *store.DeploymentRecord) *apitype.Deployment {
	d := rec.Deployment
	if d.InitialEvents == nil {
		d.InitialEvents = []json.RawMessage{}
	}
	if d.Resources == nil {
		d.Resources = []json.RawMessage{}
	}
	if d.VaultIDs == nil {
		d.VaultIDs = []string{}
	}
	if d.Metadata == nil {
		d.Metadata = map[string]string{}
	}
	if d.Schedule != nil && d.Schedule.UpcomingRunsAt == nil {
		sc := *d.Schedule
		sc.UpcomingRunsAt = []time.Time{}
		d.Schedule = &sc
	}
	return &d
}

// parseDeploymentAgent reads a deployment's agent: an id (the latest version, resolved at each run) or
// {"type":"agent","id","version"?}. It returns the reference as of now and whether it follows the latest.
func (s *Server) parseDeploymentAgent(ctx context.Context, raw json.RawMessage) (apitype.AgentRef, bool, error) {
	ref, err := parseAgentRef("agent", raw)
	if err != nil {
		return apitype.AgentRef{}, false, err
	}
	if bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")) {
		if t, _ := typeOf("agent", raw); t != "agent" {
			return apitype.AgentRef{}, false, invalid("agent.type", `must be "agent": a deployment cannot override its agent`)
		}
	}
	a, err := s.store.AgentGet(ctx, &store.AgentGetParams{ID: ref.ID, Version: ref.Version})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) && ref.Version > 0 {
			return apitype.AgentRef{}, false, invalid("agent.version", "agent %s has no version %d", ref.ID, ref.Version)
		}
		return apitype.AgentRef{}, false, lookup(err, "agent", ref.ID)
	}
	if a.ArchivedAt != nil {
		return apitype.AgentRef{}, false, invalid("agent", "agent %s is archived", ref.ID)
	}
	return apitype.AgentRef{Type: apitype.ObjectAgent, ID: a.ID, Version: a.Version}, ref.Version == 0, nil
}

// parseDeploymentEvents validates a deployment's initial events (1 to 50 user.message, user.define_outcome and
// system.message, a system.message right after the user.message it accompanies) and returns them compacted,
// as given: each run parses them anew (an outcome gets a fresh id per session).
func parseDeploymentEvents(raws []json.RawMessage) ([]json.RawMessage, error) {
	if len(raws) == 0 {
		return nil, invalid("initial_events", "required: at least one event")
	}
	if len(raws) > maxInitialEvents {
		return nil, invalid("initial_events", "at most %d events", maxInitialEvents)
	}
	out := make([]json.RawMessage, 0, len(raws))
	var prev apitype.EventType
	for i, raw := range raws {
		p := index("initial_events", i)
		ce, err := parseClientEvent(p, raw, deploymentEventTypes)
		if err != nil {
			return nil, err
		}
		if ce.ev.Type == apitype.EventSystemMessage && prev != apitype.EventUserMessage {
			return nil, invalid(p, "system.message must follow the user.message it accompanies")
		}
		prev = ce.ev.Type
		var b bytes.Buffer
		if err := json.Compact(&b, raw); err != nil {
			return nil, invalid(p, "invalid JSON")
		}
		out = append(out, b.Bytes())
	}
	return out, nil
}

var deploymentEventTypes = []apitype.EventType{apitype.EventUserMessage, apitype.EventUserDefineOutcome,
	apitype.EventSystemMessage}

// parseDeploymentResources validates a deployment's resources as a session's would be, and returns them as
// «ResourceConfig»s (without tokens) with the repository tokens sealed for the deployment, by index.
func (s *Server) parseDeploymentResources(ctx context.Context, deploymentID string, raws []json.RawMessage) ([]json.RawMessage, []store.SealedSecret, error) {
	if len(raws) > maxDeploymentResources {
		return nil, nil, invalid("resources", "at most %d resources", maxDeploymentResources)
	}
	var (
		configs []json.RawMessage
		tokens  []store.SealedSecret
		seen    []apitype.Resource
	)
	now := s.now()
	for i, raw := range raws {
		p := index("resources", i)
		res, token, err := parseResource(p, raw, now, true)
		if err != nil {
			return nil, nil, err
		}
		if err := s.checkFile(ctx, p, &res); err != nil {
			return nil, nil, err
		}
		if err := s.checkMemoryStore(ctx, p, &res, seen); err != nil {
			return nil, nil, err
		}
		if err := checkMountPath(p, seen, res.MountPath); err != nil {
			return nil, nil, err
		}
		seen = append(seen, res)
		if token != "" {
			sealed, err := s.sealDeploymentToken(deploymentID, i, token)
			if err != nil {
				return nil, nil, err
			}
			tokens = append(tokens, *sealed)
		}
		cfg, err := json.Marshal(resourceConfig(&res, raw))
		if err != nil {
			return nil, nil, err
		}
		configs = append(configs, cfg)
	}
	return configs, tokens, nil
}

// resourceConfig is «ResourceConfig»: a resource as given, without its write-only token. A memory store's
// mount path is the server's (left out); a file's or repository's is kept only when given.
func resourceConfig(res *apitype.Resource, raw json.RawMessage) map[string]any {
	var given struct {
		MountPath *string `json:"mount_path"`
	}
	_ = json.Unmarshal(raw, &given)
	cfg := map[string]any{"type": res.Type}
	switch res.Type {
	case apitype.ResourceGitHubRepository:
		cfg["url"] = res.URL
		if res.Checkout != nil {
			cfg["checkout"] = res.Checkout
		}
	case apitype.ResourceFile:
		cfg["file_id"] = res.FileID
	case apitype.ResourceMemoryStore:
		cfg["memory_store_id"] = res.MemoryStoreID
		cfg["access"] = res.Access
		if res.Instructions != "" {
			cfg["instructions"] = res.Instructions
		}
		return cfg
	}
	if given.MountPath != nil {
		cfg["mount_path"] = *given.MountPath
	}
	return cfg
}

// deploymentTokenName is the sealed name of a deployment's repository token at a resource index.
func deploymentTokenName(i int) string { return SecretAuthorizationToken + "/" + strconv.Itoa(i) }

func (s *Server) sealDeploymentToken(deploymentID string, i int, token string) (*store.SealedSecret, error) {
	if s.sealer == nil {
		return nil, errNoSealer
	}
	sealed, err := s.sealer.Seal(deploymentID, deploymentTokenName(i), []byte(token))
	if err != nil {
		return nil, fmt.Errorf("seal the authorization token of %s: %w", deploymentID, err)
	}
	return sealed, nil
}

// parseSchedule reads «Schedule» input: {"type":"cron","expression","timezone"}.
func parseSchedule(raw json.RawMessage) (*apitype.Schedule, *cron.Schedule, error) {
	typ, err := typeOf("schedule", raw)
	if err != nil {
		return nil, nil, err
	}
	if typ != "cron" {
		return nil, nil, invalid("schedule.type", `must be "cron"`)
	}
	var in struct {
		Type       string `json:"type"`
		Expression string `json:"expression"`
		Timezone   string `json:"timezone"`
	}
	if err := strictUnmarshal("schedule", raw, &in); err != nil {
		return nil, nil, err
	}
	if err := checkString("schedule.expression", in.Expression, true, 256); err != nil {
		return nil, nil, err
	}
	if err := checkString("schedule.timezone", in.Timezone, true, 128); err != nil {
		return nil, nil, err
	}
	sched, err := cron.Parse(in.Expression, in.Timezone)
	if err != nil {
		return nil, nil, invalid("schedule", "%v", err)
	}
	if sched.Next(time.Now()).IsZero() {
		return nil, nil, invalid("schedule.expression", "%q never fires", in.Expression)
	}
	return &apitype.Schedule{Type: apitype.ScheduleCron, Expression: in.Expression, Timezone: in.Timezone}, sched, nil
}

// reschedule sets a deployment's upcoming runs from now: none unless it is active and not archived.
func reschedule(d *apitype.Deployment, now time.Time) error {
	if d.Schedule == nil {
		return nil
	}
	d.Schedule.UpcomingRunsAt = []time.Time{}
	if d.Status != apitype.DeploymentActive || d.ArchivedAt != nil {
		return nil
	}
	sched, err := cron.Parse(d.Schedule.Expression, d.Schedule.Timezone)
	if err != nil {
		return fmt.Errorf("deployment %s: stored schedule: %w", d.ID, err)
	}
	d.Schedule.UpcomingRunsAt = sched.Upcoming(now, upcomingRuns)
	return nil
}

func (s *Server) deploymentCreate(w http.ResponseWriter, r *http.Request) error {
	var req deploymentCreateRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	ctx, now := r.Context(), s.now()
	rec := &store.DeploymentRecord{Deployment: apitype.Deployment{Type: apitype.ObjectDeployment,
		ID: apitype.NewID(apitype.PrefixDeployment), Status: apitype.DeploymentActive, Metadata: req.Metadata,
		CreatedAt: now, UpdatedAt: now}}
	d := &rec.Deployment
	if req.Name == nil {
		return invalid("name", "required")
	}
	if err := checkString("name", *req.Name, true, maxNameLen); err != nil {
		return err
	}
	d.Name = *req.Name
	if req.Description != nil {
		if err := checkString("description", *req.Description, false, maxDescriptionLen); err != nil {
			return err
		}
		d.Description = req.Description
	}
	if err := validateMetadata("metadata", req.Metadata); err != nil {
		return err
	}
	var err error
	if d.InitialEvents, err = parseDeploymentEvents(req.InitialEvents); err != nil {
		return err
	}
	if d.Agent, rec.AgentLatest, err = s.parseDeploymentAgent(ctx, req.Agent); err != nil {
		return err
	}
	if req.EnvironmentID == nil {
		return invalid("environment_id", "required")
	}
	if err := s.checkDeploymentEnvironment(ctx, *req.EnvironmentID); err != nil {
		return err
	}
	d.EnvironmentID = *req.EnvironmentID
	if err := s.setDeploymentTargets(ctx, rec, req.Resources, req.VaultIDs, req.Budget); err != nil {
		return err
	}
	if !isNull(req.Schedule) {
		if d.Schedule, _, err = parseSchedule(req.Schedule); err != nil {
			return err
		}
	}
	if err := reschedule(d, now); err != nil {
		return err
	}
	if err := s.own(ctx, rec.Deployment.ID); err != nil {
		return err
	}
	if err := s.store.DeploymentCreate(ctx, rec); err != nil {
		return err
	}
	s.emitWebhook(ctx, "deployment.created", d.ID)
	return writeJSON(w, http.StatusOK, viewDeployment(rec))
}

// setDeploymentTargets validates and sets what a deployment's sessions get: resources, vaults, budget.
func (s *Server) setDeploymentTargets(ctx context.Context, rec *store.DeploymentRecord, resources []json.RawMessage,
	vaults []string, budget json.RawMessage) error {
	d := &rec.Deployment
	var err error
	if d.Resources, rec.Tokens, err = s.parseDeploymentResources(ctx, d.ID, resources); err != nil {
		return err
	}
	if len(vaults) > maxDeploymentVaults {
		return invalid("vault_ids", "at most %d vaults", maxDeploymentVaults)
	}
	if err := s.checkSessionVaults(ctx, vaults); err != nil {
		return err
	}
	d.VaultIDs = vaults
	d.Budget = nil
	if !isNull(budget) {
		if d.Budget, err = resolveBudget("budget", budget); err != nil {
			return err
		}
	}
	return nil
}

// checkDeploymentEnvironment checks that a deployment's environment exists and is not archived.
func (s *Server) checkDeploymentEnvironment(ctx context.Context, id string) error {
	if err := checkString("environment_id", id, true, 256); err != nil {
		return err
	}
	env, err := s.store.EnvironmentGet(ctx, id)
	if err != nil {
		return lookup(err, "environment", id)
	}
	if env.ArchivedAt != nil {
		return invalidCode("environment_archived", "environment_id: environment %s is archived", id)
	}
	return nil
}

func (s *Server) deploymentGet(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("deployment_id")
	rec, err := s.store.DeploymentGet(r.Context(), id)
	if err != nil {
		return lookup(err, "deployment", id)
	}
	return writeJSON(w, http.StatusOK, viewDeployment(rec))
}

func (s *Server) deploymentUpdate(w http.ResponseWriter, r *http.Request) error {
	var req deploymentUpdateRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	id, ctx := r.PathValue("deployment_id"), r.Context()
	// Everything that reads other resources is checked before the transaction.
	var (
		events    []json.RawMessage
		agent     apitype.AgentRef
		latest    bool
		schedule  *apitype.Schedule
		targets   store.DeploymentRecord
		err       error
		retarget  = req.Resources.Set || req.VaultIDs.Set || req.Budget.Set
		metaPatch = req.Metadata
	)
	if req.Name != nil {
		if err := checkString("name", *req.Name, true, maxNameLen); err != nil {
			return err
		}
	}
	if req.Description.Set && !req.Description.Null {
		if err := checkString("description", req.Description.Value, false, maxDescriptionLen); err != nil {
			return err
		}
	}
	if req.InitialEvents.Set {
		if req.InitialEvents.Null {
			return invalid("initial_events", "cannot be cleared: a deployment needs at least one event")
		}
		if events, err = parseDeploymentEvents(req.InitialEvents.Value); err != nil {
			return err
		}
	}
	if !isNull(req.Agent) {
		if agent, latest, err = s.parseDeploymentAgent(ctx, req.Agent); err != nil {
			return err
		}
	}
	if req.EnvironmentID != nil {
		if err := s.checkDeploymentEnvironment(ctx, *req.EnvironmentID); err != nil {
			return err
		}
	}
	if req.Schedule.Set && !req.Schedule.Null {
		if schedule, _, err = parseSchedule(req.Schedule.Value); err != nil {
			return err
		}
	}
	cur, err := s.store.DeploymentGet(ctx, id)
	if err != nil {
		return lookup(err, "deployment", id)
	}
	if retarget {
		// Resources, vaults and budget are replaced whole when given; an omitted one keeps its value.
		targets = *cur
		res := cur.Deployment.Resources
		var tokens []store.SealedSecret
		keepTokens := !req.Resources.Set
		if req.Resources.Set {
			res = req.Resources.Value
		}
		vaults := cur.Deployment.VaultIDs
		if req.VaultIDs.Set {
			vaults = req.VaultIDs.Value
		}
		budget := cur.Deployment.Budget
		if req.Budget.Set {
			budget = req.Budget.Value
		}
		if keepTokens {
			tokens = cur.Tokens
		}
		if err := s.setDeploymentTargets(ctx, &targets, res, vaults, budget); err != nil {
			return err
		}
		if keepTokens {
			targets.Tokens = tokens
		}
	}
	now := s.now()
	rec, err := s.store.DeploymentUpdate(ctx, id, func(rec *store.DeploymentRecord) error {
		d := &rec.Deployment
		if d.ArchivedAt != nil {
			return invalid("", "deployment %s is archived and cannot be changed", id)
		}
		if req.Name != nil {
			d.Name = *req.Name
		}
		if req.Description.Set {
			d.Description = nil
			if !req.Description.Null {
				d.Description = &req.Description.Value
			}
		}
		if events != nil {
			d.InitialEvents = events
		}
		if agent.ID != "" {
			d.Agent, rec.AgentLatest = agent, latest
		}
		if req.EnvironmentID != nil {
			d.EnvironmentID = *req.EnvironmentID
		}
		if retarget {
			d.Resources, d.VaultIDs, d.Budget, rec.Tokens = targets.Deployment.Resources,
				targets.Deployment.VaultIDs, targets.Deployment.Budget, targets.Tokens
		}
		if metaPatch != nil {
			m, err := patchMetadata("metadata", d.Metadata, metaPatch)
			if err != nil {
				return err
			}
			d.Metadata = m
		}
		if req.Schedule.Set {
			var last *time.Time
			if d.Schedule != nil {
				last = d.Schedule.LastRunAt
			}
			d.Schedule = schedule
			if d.Schedule != nil {
				d.Schedule.LastRunAt = last
			}
		}
		d.UpdatedAt = now
		return reschedule(d, now)
	})
	if err != nil {
		return lookup(err, "deployment", id)
	}
	s.emitWebhook(ctx, "deployment.updated", id)
	return writeJSON(w, http.StatusOK, viewDeployment(rec))
}

func (s *Server) deploymentList(w http.ResponseWriter, r *http.Request) error {
	q := newQuery(r.URL)
	lp, limit, c, err := listParams(q, defaultLimit, maxLimit)
	if err != nil {
		return err
	}
	lp.Desc = true
	p := store.DeploymentListParams{AgentID: q.str("agent_id")}
	switch st := apitype.DeploymentStatus(q.str("status")); st {
	case "":
	case apitype.DeploymentActive, apitype.DeploymentPaused:
		if lp.IncludeArchived {
			return invalid("status", "cannot be combined with include_archived")
		}
		p.Status = st
	default:
		return invalid("status", `must be "active" or "paused"`)
	}
	data, next, _, err := listByCreated(lp, limit, c, false,
		func(lp *store.ListParams) ([]store.DeploymentRecord, error) {
			p.ListParams = *inWorkspace(r, lp)
			return s.store.DeploymentList(r.Context(), &p)
		},
		func(d *store.DeploymentRecord) (time.Time, string) { return d.Deployment.CreatedAt, d.Deployment.ID })
	if err != nil {
		return err
	}
	out := make([]apitype.Deployment, len(data))
	for i := range data {
		out[i] = *viewDeployment(&data[i])
	}
	return writeJSON(w, http.StatusOK, listPage[apitype.Deployment]{Data: out, NextPage: next})
}

// deploymentSetStatus archives, pauses or unpauses a deployment. Each is idempotent; an archived deployment
// cannot be paused or unpaused.
func (s *Server) deploymentSetStatus(hook apitype.WebhookEventType, change func(d *apitype.Deployment, now time.Time) error) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		id, now := r.PathValue("deployment_id"), s.now()
		changed := false
		rec, err := s.store.DeploymentUpdate(r.Context(), id, func(rec *store.DeploymentRecord) error {
			d := &rec.Deployment
			before := *d
			if err := change(d, now); err != nil {
				return err
			}
			changed = d.Status != before.Status || (d.ArchivedAt == nil) != (before.ArchivedAt == nil)
			if changed {
				d.UpdatedAt = now
			}
			return reschedule(d, now)
		})
		if err != nil {
			return lookup(err, "deployment", id)
		}
		if changed {
			s.emitWebhook(r.Context(), hook, id)
		}
		return writeJSON(w, http.StatusOK, viewDeployment(rec))
	}
}

func archiveDeployment(d *apitype.Deployment, now time.Time) error {
	if d.ArchivedAt == nil {
		d.ArchivedAt = &now
		// An archived deployment reports active, with archived_at set.
		d.Status, d.PausedReason = apitype.DeploymentActive, nil
	}
	return nil
}

func pauseDeployment(d *apitype.Deployment, _ time.Time) error {
	if d.ArchivedAt != nil {
		return invalid("", "deployment %s is archived", d.ID)
	}
	if d.Status != apitype.DeploymentPaused {
		d.Status, d.PausedReason = apitype.DeploymentPaused, &apitype.PausedReason{Type: apitype.PausedByHand}
	}
	return nil
}

func unpauseDeployment(d *apitype.Deployment, _ time.Time) error {
	if d.ArchivedAt != nil {
		return invalid("", "deployment %s is archived", d.ID)
	}
	// Unpausing does not backfill: the schedule starts again from now (reschedule).
	d.Status, d.PausedReason = apitype.DeploymentActive, nil
	return nil
}

// deploymentRun fires a deployment now: its run is created and carried out before the answer, which is the
// run, with its session or its error. A paused deployment runs by hand; an archived one does not.
func (s *Server) deploymentRun(w http.ResponseWriter, r *http.Request) error {
	id, ctx := r.PathValue("deployment_id"), r.Context()
	rec, err := s.store.DeploymentGet(ctx, id)
	if err != nil {
		return lookup(err, "deployment", id)
	}
	if rec.Deployment.ArchivedAt != nil {
		return invalid("", "deployment %s is archived and cannot run", id)
	}
	run := &apitype.DeploymentRun{Type: apitype.ObjectDeploymentRun, ID: apitype.NewID(apitype.PrefixDeploymentRun),
		DeploymentID: id, Agent: rec.Deployment.Agent, Trigger: apitype.TriggerContext{Type: apitype.TriggerManual},
		CreatedAt: s.now()}
	if err := s.store.DeploymentRunCreate(ctx, run); err != nil {
		return err
	}
	// The run finishes even if the client goes: a pending run is otherwise left to the runner's recovery.
	done, err := s.carryOutRun(context.WithoutCancel(ctx), run)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, done)
}

func (s *Server) deploymentRunGet(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("deployment_run_id")
	run, err := s.store.DeploymentRunGet(r.Context(), id)
	if err == nil && store.RunPending(run) {
		err = store.ErrNotFound // a run shows once it has its session or its error
	}
	if err != nil {
		return lookup(err, "deployment run", id)
	}
	return writeJSON(w, http.StatusOK, run)
}

func (s *Server) deploymentRunList(w http.ResponseWriter, r *http.Request) error {
	q := newQuery(r.URL)
	lp, limit, c, err := listParams(q, defaultLimit, maxRunListLimit)
	if err != nil {
		return err
	}
	lp.Desc, lp.IncludeArchived = true, true
	p := store.DeploymentRunListParams{DeploymentID: q.str("deployment_id")}
	if q.str("has_error") != "" {
		v, err := q.boolean("has_error")
		if err != nil {
			return err
		}
		p.HasError = &v
	}
	switch t := apitype.TriggerType(q.str("trigger_type")); t {
	case "", apitype.TriggerSchedule, apitype.TriggerManual:
		p.TriggerType = t
	default:
		return invalid("trigger_type", `must be "schedule" or "manual"`)
	}
	data, next, _, err := listByCreated(lp, limit, c, false,
		func(lp *store.ListParams) ([]apitype.DeploymentRun, error) {
			p.ListParams = *inWorkspace(r, lp)
			return s.store.DeploymentRunList(r.Context(), &p)
		},
		func(d *apitype.DeploymentRun) (time.Time, string) { return d.CreatedAt, d.ID })
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, listPage[apitype.DeploymentRun]{Data: data, NextPage: next})
}
