-- Vaults, their credentials and the credentials' sealed secrets. No column ever holds a plaintext secret:
-- vault_secrets holds ciphertext, a wrapped data key and the id of the master key that wrapped it.
CREATE TABLE vaults (
	id          text        PRIMARY KEY,
	created_at  timestamptz NOT NULL,
	archived_at timestamptz,
	doc         json        NOT NULL
);
CREATE INDEX vaults_created ON vaults (created_at, id);

CREATE TABLE vault_credentials (
	id          text        PRIMARY KEY,
	vault_id    text        NOT NULL REFERENCES vaults (id) ON DELETE CASCADE,
	created_at  timestamptz NOT NULL,
	archived_at timestamptz,
	match_key   text        NOT NULL,
	doc         json        NOT NULL
);
CREATE INDEX vault_credentials_created ON vault_credentials (vault_id, created_at, id);
CREATE UNIQUE INDEX vault_credentials_match ON vault_credentials (vault_id, match_key) WHERE archived_at IS NULL;

CREATE TABLE vault_secrets (
	credential_id text  NOT NULL REFERENCES vault_credentials (id) ON DELETE CASCADE,
	name          text  NOT NULL,
	key_id        text  NOT NULL,
	wrapped_key   bytea NOT NULL,
	ciphertext    bytea NOT NULL,
	PRIMARY KEY (credential_id, name)
);
CREATE INDEX vault_secrets_key ON vault_secrets (key_id);

CREATE TABLE vault_master_keys (
	id          text        PRIMARY KEY,
	check_value bytea       NOT NULL,
	created_at  timestamptz NOT NULL
);
