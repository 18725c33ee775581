-- The work queue of self-hosted environments, and the hashed keys their workers authenticate with.
CREATE TABLE work_items (
	id                  TEXT    PRIMARY KEY,
	environment_id      TEXT    NOT NULL,
	session_id          TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	state               TEXT    NOT NULL,
	metadata            BLOB    NOT NULL,
	created_at          INTEGER NOT NULL,
	acknowledged_at     INTEGER,
	started_at          INTEGER,
	latest_heartbeat_at INTEGER,
	stop_requested_at   INTEGER,
	stopped_at          INTEGER,
	worker_id           TEXT    NOT NULL DEFAULT '',
	key_id              TEXT    NOT NULL DEFAULT '', -- the environment key of the poll that delivered it
	polled_at           INTEGER,
	lease_expires_at    INTEGER,
	ttl_seconds         INTEGER NOT NULL DEFAULT 0,
	token_hash          TEXT,
	held                INTEGER NOT NULL DEFAULT 0,
	lost_seq            INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX work_items_env ON work_items (environment_id, created_at, id);
CREATE INDEX work_items_session ON work_items (session_id, created_at);
CREATE UNIQUE INDEX work_items_token ON work_items (token_hash) WHERE token_hash IS NOT NULL;
-- What a poll looks at: the items not stopped.
CREATE INDEX work_items_live ON work_items (environment_id, created_at, id) WHERE state <> 'stopped';

CREATE TABLE environment_keys (
	id             TEXT    PRIMARY KEY,
	environment_id TEXT    NOT NULL REFERENCES environments (id) ON DELETE CASCADE,
	name           TEXT    NOT NULL,
	hash           TEXT    NOT NULL UNIQUE,
	hint           TEXT    NOT NULL,
	created_at     INTEGER NOT NULL,
	revoked_at     INTEGER
);
CREATE INDEX environment_keys_env ON environment_keys (environment_id, created_at, id);
