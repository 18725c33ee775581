-- files holds the metadata of the Files API's files (their bytes are in the blob store under blob_key), with
-- the SHA-256 of the content. scope_id is the session a file was collected from, or empty.
CREATE TABLE files (
	id         TEXT PRIMARY KEY,
	created_at INTEGER NOT NULL,
	scope_id   TEXT NOT NULL DEFAULT '',
	sha256     TEXT NOT NULL,
	blob_key   TEXT NOT NULL,
	doc        BLOB NOT NULL
);
CREATE INDEX files_created ON files (created_at, id);
CREATE INDEX files_scope ON files (scope_id, created_at, id);
