-- Deployments and their runs: the document (a deployment's is store.DeploymentRecord), with what lists filter
-- on in columns of their own. next_run_at is store.DeploymentNextRun, NULL when the deployment is not due at
-- any time (paused, archived, unscheduled): the scheduler's scan reads only the partial index of the others.
CREATE TABLE deployments (
	id          TEXT    PRIMARY KEY,
	created_at  INTEGER NOT NULL,
	archived_at INTEGER,
	status      TEXT    NOT NULL,
	agent_id    TEXT    NOT NULL,
	next_run_at INTEGER,
	doc         BLOB    NOT NULL
);
CREATE INDEX deployments_created ON deployments (created_at, id);
CREATE INDEX deployments_agent ON deployments (agent_id, created_at, id);
CREATE INDEX deployments_due ON deployments (next_run_at, id) WHERE next_run_at IS NOT NULL;

-- scheduled_at is store.ScheduledAt (NULL for a manual run): the unique index fires each scheduled time of a
-- deployment once. A pending run has neither session nor error yet.
CREATE TABLE deployment_runs (
	id            TEXT    PRIMARY KEY,
	deployment_id TEXT    NOT NULL REFERENCES deployments (id) ON DELETE CASCADE,
	created_at    INTEGER NOT NULL,
	scheduled_at  INTEGER,
	pending       INTEGER NOT NULL,
	has_error     INTEGER NOT NULL,
	trigger_type  TEXT    NOT NULL,
	doc           BLOB    NOT NULL
);
CREATE UNIQUE INDEX deployment_runs_scheduled ON deployment_runs (deployment_id, scheduled_at)
	WHERE scheduled_at IS NOT NULL;
CREATE INDEX deployment_runs_created ON deployment_runs (created_at, id);
CREATE INDEX deployment_runs_deployment ON deployment_runs (deployment_id, created_at, id);
CREATE INDEX deployment_runs_pending ON deployment_runs (created_at, id) WHERE pending;

-- The sessions a deployment's runs created. No session had a deployment_id before (nothing set it), so there
-- is nothing to fill in.
ALTER TABLE sessions ADD COLUMN deployment_id TEXT;
CREATE INDEX sessions_deployment ON sessions (deployment_id, created_at, id) WHERE deployment_id IS NOT NULL;
