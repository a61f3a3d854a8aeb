-- name: sweep_turns_take
-- Take the sweeping turn of each bucket named whose last sweep began at least every_seconds ago
-- (or that was never swept), and return the buckets taken: the caller then sweeps exactly those.
-- Two workers offering the same bucket at once: the second waits for the first's row lock, then
-- finds the turn taken (PostgreSQL re-checks the WHERE on the new row version; CockroachDB runs the
-- statement SERIALIZABLE), so a turn is taken once. RETURNING yields only rows inserted or updated:
-- a conflict whose WHERE is false writes and returns nothing (PostgreSQL: the INSERT reference, "only
-- rows that were successfully inserted or updated will be returned"; CockroachDB:
-- pkg/sql/logictest/testdata/logic_test/upsert, "#17339. Support WHERE clause in ON CONFLICT
-- handling": two conflicting rows, one passing the WHERE, "statement count 1"; and its "INSERT ...
-- ON CONFLICT ... RETURNING" cases return the rows counted). Keyed by bucket: a point write per
-- bucket offered, no scan.
INSERT INTO shardq_sweeps (bucket, swept_at)
SELECT b.bucket, now() FROM unnest(%(buckets)s::INT4[]) AS b(bucket)
ON CONFLICT (bucket) DO UPDATE SET swept_at = excluded.swept_at
WHERE shardq_sweeps.swept_at <= now() - %(every_seconds)s::FLOAT8 * INTERVAL '1 second'
RETURNING bucket
