-- Times are Unix microseconds (UTC); documents are the JSON of the apitype resource.

CREATE TABLE agents (
	id             TEXT PRIMARY KEY,
	latest_version INTEGER NOT NULL,
	created_at     INTEGER NOT NULL,
	archived_at    INTEGER
);
CREATE INDEX agents_created ON agents (created_at, id);

CREATE TABLE agent_versions (
	agent_id TEXT    NOT NULL REFERENCES agents (id) ON DELETE CASCADE,
	version  INTEGER NOT NULL,
	doc      BLOB    NOT NULL,
	PRIMARY KEY (agent_id, version)
) WITHOUT ROWID;

CREATE TABLE environments (
	id          TEXT PRIMARY KEY,
	created_at  INTEGER NOT NULL,
	archived_at INTEGER,
	doc         BLOB    NOT NULL
);
CREATE INDEX environments_created ON environments (created_at, id);

CREATE TABLE sessions (
	id               TEXT PRIMARY KEY,
	created_at       INTEGER NOT NULL,
	archived_at      INTEGER,
	agent_id         TEXT    NOT NULL,
	agent_version    INTEGER NOT NULL,
	status           TEXT    NOT NULL,
	last_seq         INTEGER NOT NULL DEFAULT 0, -- sequence number of the last event
	wake_seq         INTEGER NOT NULL DEFAULT 0, -- bumped by every append with Wake
	handled_wake_seq INTEGER NOT NULL DEFAULT 0, -- wake_seq handled by the last release
	woken_at         INTEGER,
	lease_owner      TEXT,
	lease_token      TEXT,
	lease_expires_at INTEGER,
	usage            BLOB,
	active_seconds   REAL    NOT NULL DEFAULT 0
);
CREATE INDEX sessions_created ON sessions (created_at, id);
CREATE INDEX sessions_agent ON sessions (agent_id, agent_version, created_at, id);
-- The runnable queue: only sessions woken since their last release are in it.
CREATE INDEX sessions_runnable ON sessions (woken_at, id) WHERE wake_seq > handled_wake_seq;

-- A session's document lives apart from its row in sessions, which every append rewrites: that row stays small,
-- so the rows of many sessions share a page.
CREATE TABLE session_docs (
	session_id TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
	doc        BLOB NOT NULL
);

-- Keyed (session_id, seq) and clustered on it, so a slice of one session's log is a range scan.
CREATE TABLE events (
	session_id   TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	seq          INTEGER NOT NULL,
	id           TEXT    NOT NULL,
	type         TEXT    NOT NULL,
	created_at   INTEGER NOT NULL,
	processed_at INTEGER,
	data         BLOB    NOT NULL,
	PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE UNIQUE INDEX events_id ON events (id);

CREATE TABLE api_keys (
	id         TEXT PRIMARY KEY,
	name       TEXT    NOT NULL,
	hash       TEXT    NOT NULL UNIQUE,
	hint       TEXT    NOT NULL,
	created_at INTEGER NOT NULL,
	revoked_at INTEGER
);
CREATE INDEX api_keys_created ON api_keys (created_at, id);
