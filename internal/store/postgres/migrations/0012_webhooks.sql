-- Webhooks: the endpoints (a document each, with their state in a column of its own for the deliveries due),
-- and the durable outbox. An event is recorded once (its id: derived from what it tells) and fans out once
-- (fanned_out_at, NULL until then: fan-outs claim events with FOR UPDATE SKIP LOCKED); a delivery is one event
-- for one endpoint, its primary key keeping it unique however many processes fan out. Deliveries go with their
-- endpoint and with their event.
CREATE TABLE webhook_endpoints (
	id         text        PRIMARY KEY,
	created_at timestamptz NOT NULL,
	state      text        NOT NULL,
	doc        json        NOT NULL
);
CREATE INDEX webhook_endpoints_created ON webhook_endpoints (created_at, id);

CREATE TABLE webhook_events (
	id            text        PRIMARY KEY,
	type          text        NOT NULL,
	created_at    timestamptz NOT NULL,
	fanned_out_at timestamptz,
	doc           json        NOT NULL
);
CREATE INDEX webhook_events_unfanned ON webhook_events (created_at, id) WHERE fanned_out_at IS NULL;
CREATE INDEX webhook_events_fanned ON webhook_events (fanned_out_at) WHERE fanned_out_at IS NOT NULL;

-- webhook_deliveries: last_status is 0 and last_error '' before the first attempt; created_at is the fan-out's
-- time.
CREATE TABLE webhook_deliveries (
	event_id        text        NOT NULL REFERENCES webhook_events (id) ON DELETE CASCADE,
	endpoint_id     text        NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
	state           text        NOT NULL,
	attempts        integer     NOT NULL DEFAULT 0,
	next_attempt_at timestamptz NOT NULL,
	last_status     integer     NOT NULL DEFAULT 0,
	last_error      text        NOT NULL DEFAULT '',
	last_attempt_at timestamptz,
	created_at      timestamptz NOT NULL,
	PRIMARY KEY (event_id, endpoint_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at, event_id, endpoint_id)
	WHERE state = 'pending';
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, created_at, event_id);
CREATE INDEX webhook_deliveries_final ON webhook_deliveries (last_attempt_at) WHERE state <> 'pending';
