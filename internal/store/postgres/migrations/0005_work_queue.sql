-- The work queue of self-hosted environments, and the hashed keys their workers authenticate with.
CREATE TABLE work_items (
	id                  text        PRIMARY KEY,
	environment_id      text        NOT NULL,
	session_id          text        NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	state               text        NOT NULL,
	metadata            json        NOT NULL,
	created_at          timestamptz NOT NULL,
	acknowledged_at     timestamptz,
	started_at          timestamptz,
	latest_heartbeat_at timestamptz,
	stop_requested_at   timestamptz,
	stopped_at          timestamptz,
	worker_id           text        NOT NULL DEFAULT '',
	key_id              text        NOT NULL DEFAULT '', -- the environment key of the poll that delivered it
	polled_at           timestamptz,
	lease_expires_at    timestamptz,
	ttl_seconds         integer     NOT NULL DEFAULT 0,
	token_hash          text,
	held                boolean     NOT NULL DEFAULT false,
	lost_seq            bigint      NOT NULL DEFAULT 0
);
CREATE INDEX work_items_env ON work_items (environment_id, created_at, id);
CREATE INDEX work_items_session ON work_items (session_id, created_at);
CREATE UNIQUE INDEX work_items_token ON work_items (token_hash) WHERE token_hash IS NOT NULL;
CREATE INDEX work_items_live ON work_items (environment_id, created_at, id) WHERE state <> 'stopped';

CREATE TABLE environment_keys (
	id             text        PRIMARY KEY,
	environment_id text        NOT NULL REFERENCES environments (id) ON DELETE CASCADE,
	name           text        NOT NULL,
	hash           text        NOT NULL UNIQUE,
	hint           text        NOT NULL,
	created_at     timestamptz NOT NULL,
	revoked_at     timestamptz
);
CREATE INDEX environment_keys_env ON environment_keys (environment_id, created_at, id);
