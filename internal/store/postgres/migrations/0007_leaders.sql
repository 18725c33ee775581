-- Leader leases (store.LeaderStore): the periodic work of a fleet runs on the one process holding its lease.
CREATE TABLE leaders (
	name       text        PRIMARY KEY,
	owner      text        NOT NULL,
	token      text        NOT NULL,
	expires_at timestamptz NOT NULL
);
