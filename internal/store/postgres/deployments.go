package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/corralhq/corral/internal/apitype"
	"github.com/corralhq/corral/internal/store"
)

var (
	// deployments keep their status, agent and next due time (store.DeploymentNextRun) in columns beside the
	// document, rewritten with it on every write.
	deployments = &table[store.DeploymentRecord]{
		what: "deployment", name: "deployments", alias: "d", archivable: true,
		sel: `SELECT d.doc, d.archived_at FROM deployments d`,
		scan: scanDoc("deployment", func(d *store.DeploymentRecord, at *time.Time) {
			d.Deployment.ArchivedAt = at
		}),
		put: func(ctx context.Context, tx pgx.Tx, d, _ *store.DeploymentRecord) error {
			doc, err := json.Marshal(d)
			if err != nil {
				return fmt.Errorf("encode: %w", err)
			}
			dep := &d.Deployment
			_, err = tx.Exec(ctx, `UPDATE deployments SET doc = $2, archived_at = $3, status = $4, agent_id = $5,
				next_run_at = $6 WHERE id = $1`, dep.ID, doc, dep.ArchivedAt, string(dep.Status), dep.Agent.ID,
				store.DeploymentNextRun(d))
			return err
		},
	}
	deploymentRuns = &table[apitype.DeploymentRun]{
		what: "deployment run", name: "deployment_runs", alias: "r", owner: "deployment_id",
		sel:  `SELECT r.doc FROM deployment_runs r`,
		scan: scanDoc[apitype.DeploymentRun]("deployment run", nil),
		put: func(ctx context.Context, tx pgx.Tx, r, _ *apitype.DeploymentRun) error {
			doc, err := json.Marshal(r)
			if err != nil {
				return fmt.Errorf("encode: %w", err)
			}
			_, err = tx.Exec(ctx, `UPDATE deployment_runs SET doc = $2, pending = $3, has_error = $4 WHERE id = $1`,
				r.ID, doc, store.RunPending(r), r.Error != nil)
			return err
		},
	}
)

// DeploymentCreate stores a new deployment.
func (s *Store) DeploymentCreate(ctx context.Context, d *store.DeploymentRecord) error {
	dep := &d.Deployment
	doc, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("deployment create: encode: %w", err)
	}
	return deployments.create(ctx, s, `INSERT INTO deployments
		(id, created_at, archived_at, status, agent_id, next_run_at, doc) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		dep.ID, dep.CreatedAt, dep.ArchivedAt, string(dep.Status), dep.Agent.ID, store.DeploymentNextRun(d), doc)
}

// DeploymentGet returns a deployment.
func (s *Store) DeploymentGet(ctx context.Context, id string) (*store.DeploymentRecord, error) {
	return deployments.get(ctx, s, "d.id = $1", id)
}

// DeploymentUpdate applies fn to the deployment under a row lock and stores the result.
func (s *Store) DeploymentUpdate(ctx context.Context, id string,
	fn func(*store.DeploymentRecord) error) (*store.DeploymentRecord, error) {
	return deployments.update(ctx, s, id, fn, store.KeepDeployment)
}

// DeploymentList lists deployments.
func (s *Store) DeploymentList(ctx context.Context, p *store.DeploymentListParams) ([]store.DeploymentRecord, error) {
	q := deployments.query()
	if p.AgentID != "" {
		fmt.Fprintf(&q.sql, " AND d.agent_id = %s", q.arg(p.AgentID))
	}
	if p.Status != "" {
		fmt.Fprintf(&q.sql, " AND d.status = %s", q.arg(string(p.Status)))
	}
	return deployments.list(ctx, s, q, &p.ListParams)
}

// DeploymentListDue lists the deployments due at now, soonest first, from the partial index deployments_due.
func (s *Store) DeploymentListDue(ctx context.Context, now time.Time, limit int) ([]store.DeploymentRecord, error) {
	q := deployments.query()
	fmt.Fprintf(&q.sql, " AND d.next_run_at <= %s ORDER BY d.next_run_at, d.id", q.arg(now))
	if limit > 0 {
		fmt.Fprintf(&q.sql, " LIMIT %s", q.arg(limit))
	}
	return deployments.rows(ctx, s, "deployment list due", q.sql.String(), q.args...)
}

// DeploymentFire claims a scheduled time of a deployment and creates its runs, in one transaction. The row lock
// orders concurrent fires of one deployment: each later one reads the row its predecessor wrote, whose schedule
// has moved on (ErrConflict).
func (s *Store) DeploymentFire(ctx context.Context, p *store.DeploymentFireParams) (*store.DeploymentRecord, error) {
	if err := store.CheckFire(p); err != nil {
		return nil, err
	}
	return txResult(ctx, s, "deployment fire", func(tx pgx.Tx) (*store.DeploymentRecord, error) {
		d, err := deployments.read(ctx, tx, " FOR NO KEY UPDATE", "d.id = $1", p.DeploymentID)
		if err != nil {
			return nil, err
		}
		// The column next_run_at is the document's DeploymentNextRun in microseconds, so this is its value.
		next := store.DeploymentNextRun(d)
		if next == nil || next.UnixMicro() != p.ScheduledAt.UnixMicro() {
			return nil, fmt.Errorf("%s not due at %s: %w", p.DeploymentID,
				p.ScheduledAt.UTC().Format(time.RFC3339Nano), store.ErrConflict)
		}
		sched := *d.Deployment.Schedule
		last := p.LastRunAt
		sched.LastRunAt, sched.UpcomingRunsAt = &last, p.Upcoming
		d.Deployment.Schedule = &sched
		if err := deployments.put(ctx, tx, d, nil); err != nil {
			return nil, err
		}
		for i := range p.Runs {
			if err := insertRun(ctx, tx, &p.Runs[i]); err != nil {
				return nil, err
			}
		}
		return d, nil
	})
}

// DeploymentRunCreate stores a new run.
func (s *Store) DeploymentRunCreate(ctx context.Context, r *apitype.DeploymentRun) error {
	if err := s.check(); err != nil {
		return err
	}
	return s.dbErr("deployment run create", insertRun(ctx, s.pool, r))
}

// insertRun inserts a run; a duplicate id or (deployment, scheduled time) violates a unique index.
func insertRun(ctx context.Context, q querier, r *apitype.DeploymentRun) error {
	doc, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	_, err = q.Exec(ctx, `INSERT INTO deployment_runs
		(id, deployment_id, created_at, scheduled_at, pending, has_error, trigger_type, doc)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, r.ID, r.DeploymentID, r.CreatedAt, store.ScheduledAt(r),
		store.RunPending(r), r.Error != nil, string(r.Trigger.Type), doc)
	return err
}

// DeploymentRunGet returns a run.
func (s *Store) DeploymentRunGet(ctx context.Context, id string) (*apitype.DeploymentRun, error) {
	return deploymentRuns.get(ctx, s, "r.id = $1", id)
}

// DeploymentRunResolve records the outcome of a pending run (store.ResolvedRun) under a row lock.
func (s *Store) DeploymentRunResolve(ctx context.Context, r *apitype.DeploymentRun) (*apitype.DeploymentRun, error) {
	if err := store.CheckRunResolved(r); err != nil {
		return nil, err
	}
	// A run resolved before is returned with ErrConflict, so it is kept outside txResult's result.
	var resolved *apitype.DeploymentRun
	out, err := txResult(ctx, s, "deployment run resolve", func(tx pgx.Tx) (*apitype.DeploymentRun, error) {
		cur, err := deploymentRuns.read(ctx, tx, " FOR NO KEY UPDATE", "r.id = $1", r.ID)
		if err != nil {
			return nil, err
		}
		if !store.RunPending(cur) {
			resolved = cur
			return nil, store.ErrConflict
		}
		next := store.ResolvedRun(cur, r)
		return next, deploymentRuns.put(ctx, tx, next, cur)
	})
	if err != nil {
		return resolved, err
	}
	return out, nil
}

// DeploymentRunList lists runs.
func (s *Store) DeploymentRunList(ctx context.Context, p *store.DeploymentRunListParams) ([]apitype.DeploymentRun, error) {
	q := deploymentRuns.query()
	if p.DeploymentID != "" {
		fmt.Fprintf(&q.sql, " AND r.deployment_id = %s", q.arg(p.DeploymentID))
	}
	if p.HasError != nil {
		fmt.Fprintf(&q.sql, " AND r.has_error = %s", q.arg(*p.HasError))
	}
	if p.TriggerType != "" {
		fmt.Fprintf(&q.sql, " AND r.trigger_type = %s", q.arg(string(p.TriggerType)))
	}
	if !p.IncludePending {
		q.sql.WriteString(" AND NOT r.pending")
	}
	return deploymentRuns.list(ctx, s, q, &p.ListParams)
}

// DeploymentRunListPending lists the pending runs created at or before before, oldest first, from the partial
// index deployment_runs_pending.
func (s *Store) DeploymentRunListPending(ctx context.Context, before time.Time, limit int) ([]apitype.DeploymentRun, error) {
	q := deploymentRuns.query()
	q.sql.WriteString(" AND r.pending")
	return deploymentRuns.list(ctx, s, q, &store.ListParams{Limit: limit, CreatedTo: &before})
}
