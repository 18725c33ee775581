-- resource_secrets holds the sealed secrets of session resources (a repository's authorization_token): ciphertext,
-- a wrapped data key and the id of the master key that wrapped it, as vault_secrets. They go with their session.
CREATE TABLE resource_secrets (
	session_id  text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	resource_id text NOT NULL,
	name        text NOT NULL,
	key_id      text NOT NULL,
	wrapped_key bytea NOT NULL,
	ciphertext  bytea NOT NULL,
	PRIMARY KEY (session_id, resource_id, name)
);
CREATE INDEX resource_secrets_key ON resource_secrets (key_id);
