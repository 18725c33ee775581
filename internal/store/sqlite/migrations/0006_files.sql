-- files holds the metadata of the Files API's files (their bytes are in the blob store under blob_key), with
-- the SHA-256 of the content. scope_id is the session a file was collected from, or empty.
CREATE TABLE files (
	id         TEXT PRIMARY KEY,
	created_at INTEGER NOT NULL,
	scope_id   TEXT NOT NULL DEFAULT '',
	sha256     TEXT NOT NULL,
	blob_key   TEXT NOT NULL,
	expires_at INTEGER,
	doc        BLOB NOT NULL
);
CREATE INDEX files_created ON files (created_at, id);
CREATE INDEX files_scope ON files (scope_id, created_at, id);
CREATE INDEX files_expires ON files (expires_at) WHERE expires_at IS NOT NULL;

-- skills and their immutable versions (the Skills API); a version's zip is in the blob store under blob_key.
CREATE TABLE skills (
	id         TEXT PRIMARY KEY,
	created_at INTEGER NOT NULL,
	doc        BLOB NOT NULL
);
CREATE INDEX skills_created ON skills (created_at, id);
CREATE TABLE skill_versions (
	skill_id   TEXT NOT NULL REFERENCES skills (id) ON DELETE CASCADE,
	id         TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	sha256     TEXT NOT NULL,
	size       INTEGER NOT NULL,
	blob_key   TEXT NOT NULL,
	doc        BLOB NOT NULL,
	PRIMARY KEY (skill_id, id)
);
CREATE INDEX skill_versions_created ON skill_versions (skill_id, created_at, id);
