-- Environment names are unique among the environments that are not archived (archiving frees a name). The
-- name column copies the document's; of environments that already share a name, only the oldest takes it, so
-- that the others keep working (their name is NULL here until they are renamed).
ALTER TABLE environments ADD COLUMN name text;
UPDATE environments e SET name = e.doc->>'name'
WHERE e.archived_at IS NULL AND e.id = (
	SELECT e2.id FROM environments e2
	WHERE e2.archived_at IS NULL AND e2.doc->>'name' = e.doc->>'name'
	ORDER BY e2.created_at, e2.id LIMIT 1
);
CREATE UNIQUE INDEX environments_name ON environments (name) WHERE archived_at IS NULL;
