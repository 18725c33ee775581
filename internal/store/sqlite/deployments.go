package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

var (
	// deployments keep their status, agent and next due time (store.DeploymentNextRun) in columns beside the
	// document, rewritten with it on every write.
	deployments = &table[store.DeploymentRecord]{
		what: "deployment", name: "deployments", alias: "d", archivable: true,
		sel:  `SELECT d.doc FROM deployments d`,
		scan: scanDoc[store.DeploymentRecord]("deployment", nil),
		put: func(w *wtx, d, _ *store.DeploymentRecord) error {
			doc, err := json.Marshal(d)
			if err != nil {
				return err
			}
			dep := &d.Deployment
			_, err = w.exec(`UPDATE deployments SET archived_at = ?, status = ?, agent_id = ?, next_run_at = ?, doc = ?
				WHERE id = ?`, nullMicros(dep.ArchivedAt), string(dep.Status), dep.Agent.ID,
				nullMicros(store.DeploymentNextRun(d)), doc, dep.ID)
			return err
		},
	}
	deploymentRuns = &table[apitype.DeploymentRun]{
		what: "deployment run", name: "deployment_runs", alias: "r", owner: "deployment_id",
		sel:  `SELECT r.doc FROM deployment_runs r`,
		scan: scanDoc[apitype.DeploymentRun]("deployment run", nil),
		put: func(w *wtx, r, _ *apitype.DeploymentRun) error {
			doc, err := json.Marshal(r)
			if err != nil {
				return err
			}
			_, err = w.exec(`UPDATE deployment_runs SET pending = ?, has_error = ?, doc = ? WHERE id = ?`,
				store.RunPending(r), r.Error != nil, doc, r.ID)
			return err
		},
	}
)

// DeploymentCreate stores a new deployment.
func (s *Store) DeploymentCreate(ctx context.Context, d *store.DeploymentRecord) error {
	dep := &d.Deployment
	doc, err := json.Marshal(d)
	if err != nil {
		return writeErr(err, "create deployment %s", dep.ID)
	}
	return deployments.create(ctx, s, dep.ID, `INSERT INTO deployments
		(id, created_at, archived_at, status, agent_id, next_run_at, doc) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		dep.ID, micros(dep.CreatedAt), nullMicros(dep.ArchivedAt), string(dep.Status), dep.Agent.ID,
		nullMicros(store.DeploymentNextRun(d)), doc)
}

// DeploymentGet returns a deployment.
func (s *Store) DeploymentGet(ctx context.Context, id string) (*store.DeploymentRecord, error) {
	return deployments.get(ctx, s, id, "d.id = ?", id)
}

// DeploymentUpdate applies fn to the deployment and stores the result, atomically.
func (s *Store) DeploymentUpdate(ctx context.Context, id string,
	fn func(*store.DeploymentRecord) error) (*store.DeploymentRecord, error) {
	return deployments.update(ctx, s, id, fn, store.KeepDeployment)
}

// DeploymentList lists deployments.
func (s *Store) DeploymentList(ctx context.Context, p *store.DeploymentListParams) ([]store.DeploymentRecord, error) {
	f := &filter{}
	if p.AgentID != "" {
		f.add("d.agent_id = ?", p.AgentID)
	}
	if p.Status != "" {
		f.add("d.status = ?", string(p.Status))
	}
	return deployments.list(ctx, s, f, &p.ListParams)
}

// DeploymentListDue lists the deployments due at now, soonest first, from the partial index deployments_due.
func (s *Store) DeploymentListDue(ctx context.Context, now time.Time, limit int) ([]store.DeploymentRecord, error) {
	return deployments.rows(ctx, s, "list due deployments",
		deployments.sel+` WHERE d.next_run_at <= ? ORDER BY d.next_run_at, d.id LIMIT ?`, micros(now), limitArg(limit))
}

// DeploymentFire claims a scheduled time of a deployment and creates its runs, in one write: the single writer
// runs one fire at a time, so the later of two fires of one time finds the schedule advanced (ErrConflict).
func (s *Store) DeploymentFire(ctx context.Context, p *store.DeploymentFireParams) (*store.DeploymentRecord, error) {
	if err := store.CheckFire(p); err != nil {
		return nil, fmt.Errorf("sqlite: fire deployment %s: %w", p.DeploymentID, err)
	}
	return writeResult(ctx, s, func(w *wtx) (*store.DeploymentRecord, error) {
		d, err := deployments.read(w, "d.id = ?", p.DeploymentID)
		if err != nil {
			return nil, err
		}
		// The column next_run_at is the document's DeploymentNextRun in microseconds, so this is its value.
		next := store.DeploymentNextRun(d)
		if next == nil || micros(*next) != micros(p.ScheduledAt) {
			return nil, fmt.Errorf("not due at %s: %w", p.ScheduledAt.UTC().Format(time.RFC3339Nano), store.ErrConflict)
		}
		sched := *d.Deployment.Schedule
		last := p.LastRunAt
		sched.LastRunAt, sched.UpcomingRunsAt = &last, p.Upcoming
		d.Deployment.Schedule = &sched
		if err := deployments.put(w, d, nil); err != nil {
			return nil, err
		}
		for i := range p.Runs {
			if err := insertRun(w, &p.Runs[i]); err != nil {
				return nil, err
			}
		}
		return d, nil
	}, "fire deployment %s", p.DeploymentID)
}

// DeploymentRunCreate stores a new run.
func (s *Store) DeploymentRunCreate(ctx context.Context, r *apitype.DeploymentRun) error {
	err := s.write(ctx, func(w *wtx) error { return insertRun(w, r) }, nil)
	return writeErr(err, "create deployment run %s", r.ID)
}

// insertRun inserts a run; a duplicate id or (deployment, scheduled time) violates a unique index.
func insertRun(w *wtx, r *apitype.DeploymentRun) error {
	doc, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.exec(`INSERT INTO deployment_runs
		(id, deployment_id, created_at, scheduled_at, pending, has_error, trigger_type, doc) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		r.ID, r.DeploymentID, micros(r.CreatedAt), nullMicros(store.ScheduledAt(r)), store.RunPending(r),
		r.Error != nil, string(r.Trigger.Type), doc)
	return err
}

// DeploymentRunGet returns a run.
func (s *Store) DeploymentRunGet(ctx context.Context, id string) (*apitype.DeploymentRun, error) {
	return deploymentRuns.get(ctx, s, id, "r.id = ?", id)
}

// DeploymentRunResolve records the outcome of a pending run (store.ResolvedRun).
func (s *Store) DeploymentRunResolve(ctx context.Context, r *apitype.DeploymentRun) (*apitype.DeploymentRun, error) {
	if err := store.CheckRunResolved(r); err != nil {
		return nil, fmt.Errorf("sqlite: resolve %w", err)
	}
	// A run resolved before is returned with ErrConflict, so it is kept outside writeResult's result.
	var out, resolved *apitype.DeploymentRun
	err := s.write(ctx, func(w *wtx) error {
		cur, err := deploymentRuns.read(w, "r.id = ?", r.ID)
		if err != nil {
			return err
		}
		if !store.RunPending(cur) {
			resolved = cur
			return store.ErrConflict
		}
		out = store.ResolvedRun(cur, r)
		return deploymentRuns.put(w, out, cur)
	}, nil)
	if err := writeErr(err, "resolve deployment run %s", r.ID); err != nil {
		return resolved, err
	}
	return out, nil
}

// DeploymentRunList lists runs.
func (s *Store) DeploymentRunList(ctx context.Context, p *store.DeploymentRunListParams) ([]apitype.DeploymentRun, error) {
	f := &filter{}
	if p.DeploymentID != "" {
		f.add("r.deployment_id = ?", p.DeploymentID)
	}
	if p.HasError != nil {
		f.add("r.has_error = ?", *p.HasError)
	}
	if p.TriggerType != "" {
		f.add("r.trigger_type = ?", string(p.TriggerType))
	}
	if !p.IncludePending {
		f.add("NOT r.pending")
	}
	return deploymentRuns.list(ctx, s, f, &p.ListParams)
}

// DeploymentRunListPending lists the pending runs created at or before before, oldest first, from the partial
// index deployment_runs_pending.
func (s *Store) DeploymentRunListPending(ctx context.Context, before time.Time, limit int) ([]apitype.DeploymentRun, error) {
	f := &filter{}
	f.add("r.pending")
	return deploymentRuns.list(ctx, s, f, &store.ListParams{Limit: limit, CreatedTo: &before})
}
