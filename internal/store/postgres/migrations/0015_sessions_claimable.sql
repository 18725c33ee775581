-- A brain's claim takes sessions that are runnable and hold no lease, or one that lapsed. sessions_runnable held
-- every runnable session, leased or not, in the order they were woken: with 2,000 sessions in their turns, each
-- claim walked 2,000 entries and read every row for its lease (docs/benchmarks.md, stop 59). Each part of the
-- claim now has an index of its own. lease_token and lease_expires_at are set and cleared together.
DROP INDEX sessions_runnable;
CREATE INDEX sessions_unleased ON sessions (woken_at, id) WHERE wake_seq > handled_wake_seq AND lease_expires_at IS NULL;
CREATE INDEX sessions_leased ON sessions (lease_expires_at) WHERE wake_seq > handled_wake_seq AND lease_expires_at IS NOT NULL;
