-- Dreams (issue 24): the document, with its status and, while it has not ended, the memory store it updates
-- (update_existing) in columns of their own. The unique index keeps two dreams that have not ended from
-- updating one store; a dream frees its store when it ends (the store sets target to NULL).
CREATE TABLE dreams (
	id          TEXT    PRIMARY KEY,
	created_at  INTEGER NOT NULL,
	archived_at INTEGER,
	status      TEXT    NOT NULL,
	target      TEXT,
	doc         BLOB    NOT NULL
);
CREATE INDEX dreams_created ON dreams (created_at, id);
CREATE INDEX dreams_active ON dreams (created_at, id) WHERE status IN ('pending', 'running');
CREATE UNIQUE INDEX dreams_target ON dreams (target) WHERE target IS NOT NULL;
