-- Environment names are unique among the environments that are not archived (archiving frees a name). The
-- name column copies the document's; of environments that already share a name, only the oldest takes it, so
-- that the others keep working (their name is NULL here until they are renamed).
ALTER TABLE environments ADD COLUMN name TEXT;
UPDATE environments SET name = json_extract(CAST(doc AS TEXT), '$.name')
WHERE archived_at IS NULL AND id = (
	SELECT e2.id FROM environments e2
	WHERE e2.archived_at IS NULL
		AND json_extract(CAST(e2.doc AS TEXT), '$.name') = json_extract(CAST(environments.doc AS TEXT), '$.name')
	ORDER BY e2.created_at, e2.id LIMIT 1
);
CREATE UNIQUE INDEX environments_name ON environments (name) WHERE archived_at IS NULL;
