-- MCP tunnels: the document (store.TunnelRecord, with the sealed token), with the domain and the current token's
-- hash in unique columns of their own. An archived tunnel keeps its row, so its domain is never reused; a
-- rotated token's hash leaves the column, so it finds nothing.
CREATE TABLE tunnels (
	id          text        PRIMARY KEY,
	domain      text        NOT NULL,
	token_hash  text        NOT NULL,
	created_at  timestamptz NOT NULL,
	archived_at timestamptz,
	doc         json        NOT NULL
);
CREATE UNIQUE INDEX tunnels_domain ON tunnels (domain);
CREATE UNIQUE INDEX tunnels_token_hash ON tunnels (token_hash);
CREATE INDEX tunnels_created ON tunnels (created_at, id);

-- A tunnel's CA certificates: the document (store.TunnelCertificateRecord, with the PEM); archived_at is the
-- column's, not the document's (archiving a tunnel stamps its active certificates). At most
-- store.MaxTunnelCertificates of a tunnel are active, counted in the transaction that adds one under a lock of
-- the tunnel's row.
CREATE TABLE tunnel_certificates (
	id          text        PRIMARY KEY,
	tunnel_id   text        NOT NULL REFERENCES tunnels (id) ON DELETE CASCADE,
	created_at  timestamptz NOT NULL,
	archived_at timestamptz,
	doc         json        NOT NULL
);
CREATE INDEX tunnel_certificates_tunnel ON tunnel_certificates (tunnel_id, created_at, id);
CREATE INDEX tunnel_certificates_active ON tunnel_certificates (tunnel_id) WHERE archived_at IS NULL;
