-- Webhooks: the endpoints (a document each, with their state in a column of its own for the deliveries due),
-- and the durable outbox. An event is recorded once (its id: derived from what it tells) and fans out once
-- (fanned_out_at, NULL until then); a delivery is one event for one endpoint, its primary key keeping it
-- unique however many processes fan out. Deliveries go with their endpoint and with their event.
CREATE TABLE webhook_endpoints (
	id         TEXT    PRIMARY KEY,
	created_at INTEGER NOT NULL,
	state      TEXT    NOT NULL,
	doc        BLOB    NOT NULL
);
CREATE INDEX webhook_endpoints_created ON webhook_endpoints (created_at, id);

CREATE TABLE webhook_events (
	id            TEXT    PRIMARY KEY,
	type          TEXT    NOT NULL,
	created_at    INTEGER NOT NULL,
	fanned_out_at INTEGER,
	doc           BLOB    NOT NULL
);
CREATE INDEX webhook_events_unfanned ON webhook_events (created_at, id) WHERE fanned_out_at IS NULL;
CREATE INDEX webhook_events_fanned ON webhook_events (fanned_out_at) WHERE fanned_out_at IS NOT NULL;

-- webhook_deliveries: last_status is 0 and last_error '' before the first attempt; created_at is the fan-out's
-- time.
CREATE TABLE webhook_deliveries (
	event_id        TEXT    NOT NULL REFERENCES webhook_events (id) ON DELETE CASCADE,
	endpoint_id     TEXT    NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
	state           TEXT    NOT NULL,
	attempts        INTEGER NOT NULL DEFAULT 0,
	next_attempt_at INTEGER NOT NULL,
	last_status     INTEGER NOT NULL DEFAULT 0,
	last_error      TEXT    NOT NULL DEFAULT '',
	last_attempt_at INTEGER,
	created_at      INTEGER NOT NULL,
	PRIMARY KEY (event_id, endpoint_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at, event_id, endpoint_id)
	WHERE state = 'pending';
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, created_at, event_id);
CREATE INDEX webhook_deliveries_final ON webhook_deliveries (last_attempt_at) WHERE state <> 'pending';
