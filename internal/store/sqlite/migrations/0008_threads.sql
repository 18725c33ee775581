-- Multi-agent sessions (issue 22): a session has threads, and one log. Each event belongs to a thread ('' the
-- primary, as every event of a single-agent session), and a child's event may be cross-posted to the session's
-- stream.
ALTER TABLE events ADD COLUMN thread_id TEXT NOT NULL DEFAULT '';
ALTER TABLE events ADD COLUMN crosspost INTEGER NOT NULL DEFAULT 0;
-- One child thread's events in seq order. Partial: the primary's events (all of a single-agent session's) are
-- read by the primary key and cost appends nothing here.
CREATE INDEX events_thread ON events (session_id, thread_id, seq) WHERE thread_id <> '';

-- A thread's document, with the columns the store owns (status, usage, stats, updated_at, archived_at), which
-- override the document's copies: an append that writes a stored thread sets those columns only.
CREATE TABLE threads (
	session_id       TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	id               TEXT    NOT NULL,
	parent_thread_id TEXT,
	status           TEXT    NOT NULL,
	usage            BLOB,
	stats            BLOB,
	created_at       INTEGER NOT NULL,
	updated_at       INTEGER NOT NULL,
	archived_at      INTEGER,
	doc              BLOB    NOT NULL,
	PRIMARY KEY (session_id, id)
) WITHOUT ROWID;
CREATE INDEX threads_created ON threads (session_id, created_at, id);
