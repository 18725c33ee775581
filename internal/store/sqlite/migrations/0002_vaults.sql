-- Vaults, their credentials and the credentials' sealed secrets. No column ever holds a plaintext secret:
-- vault_secrets holds ciphertext, a wrapped data key and the id of the master key that wrapped it.
CREATE TABLE vaults (
	id          TEXT PRIMARY KEY,
	created_at  INTEGER NOT NULL,
	archived_at INTEGER,
	doc         BLOB    NOT NULL
);
CREATE INDEX vaults_created ON vaults (created_at, id);

CREATE TABLE vault_credentials (
	id          TEXT PRIMARY KEY,
	vault_id    TEXT    NOT NULL REFERENCES vaults (id) ON DELETE CASCADE,
	created_at  INTEGER NOT NULL,
	archived_at INTEGER,
	match_key   TEXT    NOT NULL,
	doc         BLOB    NOT NULL
);
CREATE INDEX vault_credentials_created ON vault_credentials (vault_id, created_at, id);
CREATE UNIQUE INDEX vault_credentials_match ON vault_credentials (vault_id, match_key) WHERE archived_at IS NULL;

CREATE TABLE vault_secrets (
	credential_id TEXT NOT NULL REFERENCES vault_credentials (id) ON DELETE CASCADE,
	name          TEXT NOT NULL,
	key_id        TEXT NOT NULL,
	wrapped_key   BLOB NOT NULL,
	ciphertext    BLOB NOT NULL,
	PRIMARY KEY (credential_id, name)
);
CREATE INDEX vault_secrets_key ON vault_secrets (key_id);

CREATE TABLE vault_master_keys (
	id          TEXT PRIMARY KEY,
	check_value BLOB    NOT NULL,
	created_at  INTEGER NOT NULL
);
