-- files holds the metadata of the Files API's files (their bytes are in the blob store under blob_key), with
-- the SHA-256 of the content. scope_id is the session a file was collected from, or empty.
CREATE TABLE files (
	id         text PRIMARY KEY,
	created_at timestamptz NOT NULL,
	scope_id   text NOT NULL DEFAULT '',
	sha256     text NOT NULL,
	blob_key   text NOT NULL,
	doc        json NOT NULL
);
CREATE INDEX files_created ON files (created_at, id);
CREATE INDEX files_scope ON files (scope_id, created_at, id);
