-- Memory stores (a document each, like the other resources), their memories with their current content, and
-- every version of them. A memory's path is unique in its store and compared byte for byte: SQLite's default
-- BINARY collation orders and compares TEXT by its bytes. Versions outlive their memory (no reference to it)
-- and go with their store, as the memories do.
CREATE TABLE memory_stores (
	id          TEXT PRIMARY KEY,
	created_at  INTEGER NOT NULL,
	archived_at INTEGER,
	doc         BLOB    NOT NULL
);
CREATE INDEX memory_stores_created ON memory_stores (created_at, id);

CREATE TABLE memories (
	id         TEXT PRIMARY KEY,
	store_id   TEXT    NOT NULL REFERENCES memory_stores (id) ON DELETE CASCADE,
	path       TEXT    NOT NULL,
	content    TEXT    NOT NULL,
	sha256     TEXT    NOT NULL,
	size       INTEGER NOT NULL,
	version_id TEXT    NOT NULL,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX memories_path ON memories (store_id, path);

-- memory_versions: path, content, sha256 and size are NULL once redacted (the last three also for a deletion).
-- created_by and redacted_by are the actors' JSON; session_id, api_key_id and service_account_id repeat the
-- creating actor's id for the list's filters.
CREATE TABLE memory_versions (
	id                 TEXT PRIMARY KEY,
	store_id           TEXT    NOT NULL REFERENCES memory_stores (id) ON DELETE CASCADE,
	memory_id          TEXT    NOT NULL,
	operation          TEXT    NOT NULL,
	created_at         INTEGER NOT NULL,
	path               TEXT,
	content            TEXT,
	sha256             TEXT,
	size               INTEGER,
	created_by         BLOB    NOT NULL,
	session_id         TEXT,
	api_key_id         TEXT,
	service_account_id TEXT,
	redacted_at        INTEGER,
	redacted_by        BLOB
);
CREATE INDEX memory_versions_created ON memory_versions (store_id, created_at DESC, id DESC);
CREATE INDEX memory_versions_memory ON memory_versions (store_id, memory_id, created_at DESC, id DESC);
CREATE INDEX memory_versions_session ON memory_versions (store_id, session_id, created_at DESC, id DESC)
	WHERE session_id IS NOT NULL;
