-- Resources are stored as JSON documents (kept verbatim, so raw fields round-trip byte for byte) beside the
-- columns that lists filter and order on. Sessions carry their scheduling state in columns; the document holds
-- only what the API owns.

CREATE TABLE agents (
	id             text        PRIMARY KEY,
	latest_version integer     NOT NULL,
	created_at     timestamptz NOT NULL,
	archived_at    timestamptz
);
CREATE INDEX agents_created ON agents (created_at, id);

CREATE TABLE agent_versions (
	agent_id text    NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
	version  integer NOT NULL,
	doc      json    NOT NULL,
	PRIMARY KEY (agent_id, version)
);

CREATE TABLE environments (
	id          text        PRIMARY KEY,
	created_at  timestamptz NOT NULL,
	archived_at timestamptz,
	doc         json        NOT NULL
);
CREATE INDEX environments_created ON environments (created_at, id);

CREATE TABLE sessions (
	id               text             PRIMARY KEY,
	created_at       timestamptz      NOT NULL,
	archived_at      timestamptz,
	agent_id         text             NOT NULL,
	agent_version    integer          NOT NULL,
	doc              json             NOT NULL,
	status           text             NOT NULL,
	usage            json             NOT NULL,
	active_seconds   double precision NOT NULL DEFAULT 0,
	last_seq         bigint           NOT NULL DEFAULT 0,
	wake_seq         bigint           NOT NULL DEFAULT 0,
	handled_wake_seq bigint           NOT NULL DEFAULT 0,
	woken_at         timestamptz,
	lease_owner      text,
	lease_token      text,
	lease_expires_at timestamptz
);
CREATE INDEX sessions_created ON sessions (created_at, id);
CREATE INDEX sessions_agent ON sessions (agent_id, agent_version);
-- The claim query scans only runnable sessions, oldest wake-up first.
CREATE INDEX sessions_runnable ON sessions (woken_at, id) WHERE wake_seq > handled_wake_seq;

-- A session's log, keyed so that a slice is an index range scan. No foreign key to sessions: the append inserts
-- events only for the session rows it has just updated (and so locked), SessionDelete removes a session's events
-- after its row, and the per-row key check would cost a third of an append's execution time.
CREATE TABLE events (
	session_id   text        NOT NULL,
	seq          bigint      NOT NULL,
	id           text        NOT NULL,
	type         text        NOT NULL,
	created_at   timestamptz NOT NULL,
	processed_at timestamptz,
	data         json        NOT NULL,
	PRIMARY KEY (session_id, seq)
);
-- Resuming a stream from an event id.
CREATE UNIQUE INDEX events_id ON events (id);

CREATE TABLE api_keys (
	id         text        PRIMARY KEY,
	name       text        NOT NULL,
	hash       text        NOT NULL UNIQUE,
	hint       text        NOT NULL,
	created_at timestamptz NOT NULL,
	revoked_at timestamptz
);
