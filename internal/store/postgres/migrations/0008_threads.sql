-- Multi-agent sessions (issue 22): a session has threads, and one log. Each event belongs to a thread ('' the
-- primary, as every event of a single-agent session), and a child's event may be cross-posted to the session's
-- stream. Both columns have constant defaults: adding them rewrites nothing.
ALTER TABLE events ADD COLUMN thread_id text NOT NULL DEFAULT '';
ALTER TABLE events ADD COLUMN crosspost boolean NOT NULL DEFAULT false;
-- One child thread's events in seq order. Partial: the primary's events (all of a single-agent session's) are
-- read by the primary key and cost appends nothing here. Keyed on NULLIF(thread_id, '') so that a query's
-- "NULLIF(thread_id, '') = $n" proves the index's condition whatever $n (a strict operator implies IS NOT NULL)
-- and adds no selectivity of its own: with "thread_id = $n AND thread_id <> ''" the planner multiplies both
-- estimates, believes a thread has a handful of rows and sorts all of them instead of reading the first ones
-- in order.
CREATE INDEX events_thread ON events (session_id, (NULLIF(thread_id, '')), seq) WHERE NULLIF(thread_id, '') IS NOT NULL;
-- A thread belongs to one session: without this the planner multiplies the session's and the thread's
-- selectivities, underestimates a thread's events and may read them all by bitmap and sort them.
CREATE STATISTICS events_thread_stats (dependencies, ndistinct) ON session_id, (NULLIF(thread_id, '')) FROM events;

-- A thread's document, with the columns the store owns (status, usage, stats, updated_at, archived_at), which
-- override the document's copies: an append that writes a stored thread sets those columns only.
CREATE TABLE threads (
	session_id       text        NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	id               text        NOT NULL,
	parent_thread_id text,
	status           text        NOT NULL,
	usage            json,
	stats            json,
	created_at       timestamptz NOT NULL,
	updated_at       timestamptz NOT NULL,
	archived_at      timestamptz,
	doc              json        NOT NULL,
	PRIMARY KEY (session_id, id)
);
CREATE INDEX threads_created ON threads (session_id, created_at, id);
