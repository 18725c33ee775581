-- Leader leases (store.LeaderStore): the periodic work of a fleet runs on the one process holding its lease.
CREATE TABLE leaders (
	name       TEXT    PRIMARY KEY,
	owner      TEXT    NOT NULL,
	token      TEXT    NOT NULL,
	expires_at INTEGER NOT NULL
);
