-- Memory stores (a document each, like the other resources), their memories with their current content, and
-- every version of them. A memory's path is unique in its store and compared byte for byte: the path columns
-- use the "C" collation, which orders and compares by bytes. Versions outlive their memory (no reference to it)
-- and go with their store, as the memories do.
CREATE TABLE memory_stores (
	id          text        PRIMARY KEY,
	created_at  timestamptz NOT NULL,
	archived_at timestamptz,
	doc         json        NOT NULL
);
CREATE INDEX memory_stores_created ON memory_stores (created_at, id);

CREATE TABLE memories (
	id         text        PRIMARY KEY,
	store_id   text        NOT NULL REFERENCES memory_stores (id) ON DELETE CASCADE,
	path       text        COLLATE "C" NOT NULL,
	content    text        NOT NULL,
	sha256     text        NOT NULL,
	size       bigint      NOT NULL,
	version_id text        NOT NULL,
	created_at timestamptz NOT NULL,
	updated_at timestamptz NOT NULL
);
CREATE UNIQUE INDEX memories_path ON memories (store_id, path);

-- memory_versions: path, content, sha256 and size are NULL once redacted (the last three also for a deletion).
-- created_by and redacted_by are the actors' JSON; session_id, api_key_id and service_account_id repeat the
-- creating actor's id for the list's filters.
CREATE TABLE memory_versions (
	id                 text        PRIMARY KEY,
	store_id           text        NOT NULL REFERENCES memory_stores (id) ON DELETE CASCADE,
	memory_id          text        NOT NULL,
	operation          text        NOT NULL,
	created_at         timestamptz NOT NULL,
	path               text        COLLATE "C",
	content            text,
	sha256             text,
	size               bigint,
	created_by         json        NOT NULL,
	session_id         text,
	api_key_id         text,
	service_account_id text,
	redacted_at        timestamptz,
	redacted_by        json
);
CREATE INDEX memory_versions_created ON memory_versions (store_id, created_at DESC, id DESC);
CREATE INDEX memory_versions_memory ON memory_versions (store_id, memory_id, created_at DESC, id DESC);
CREATE INDEX memory_versions_session ON memory_versions (store_id, session_id, created_at DESC, id DESC)
	WHERE session_id IS NOT NULL;
