-- A brain's claim looks for sessions that are runnable and hold no lease, or one that lapsed. sessions_runnable
-- held every runnable session, leased or not, in the order they were woken: with 1,500 sessions in their turns,
-- each look and each claim walked 1,500 entries and read every row for its lease (docs/benchmarks.md, stop 58).
-- This index puts the runnable sessions that hold no lease (NULL sorts first) in the order they were woken, then
-- the leased ones by when their lease lapses: a claim is a search of the first and a range of the second.
-- lease_token and lease_expires_at are set and cleared together.
DROP INDEX sessions_runnable;
CREATE INDEX sessions_claimable ON sessions (lease_expires_at, woken_at, id) WHERE wake_seq > handled_wake_seq;
