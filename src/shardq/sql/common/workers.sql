-- The worker registry (migration 0009): one row per live worker, kept by the worker itself
-- (shardq.maintenance.worker_registry) and read whole by the dashboard (it is one row per worker).

-- name: worker_beat
-- A worker's registry beat: its row, created on the first beat and refreshed on every later one
-- (tasks in hand and running, its claims' lease tokens, the beat time). One keyed upsert.
INSERT INTO shardq_workers (id, host, pid, queues, concurrency, in_hand, running, tokens, started_at, beat_at)
VALUES (%(id)s::UUID, %(host)s::TEXT, %(pid)s::INT4, %(queues)s::TEXT[], %(concurrency)s::INT4, %(in_hand)s::INT4,
        %(running)s::INT4, %(tokens)s::UUID[], %(started_at)s::TIMESTAMPTZ, now())
ON CONFLICT (id) DO UPDATE SET in_hand = excluded.in_hand, running = excluded.running, tokens = excluded.tokens,
    beat_at = excluded.beat_at

-- name: worker_leave
-- A worker that stops removes its own row.
DELETE FROM shardq_workers WHERE id = %(id)s::UUID

-- name: worker_prune
-- Remove the rows of workers that have not beaten for older_than seconds (crashed or cut off).
DELETE FROM shardq_workers WHERE beat_at < now() - %(older_than)s::FLOAT8 * INTERVAL '1 second'
RETURNING id

-- name: worker_list
-- Every registered worker (one row each; limit bounds a runaway registry), with the seconds since
-- the database's clock (a beat's age is measured by the clock that wrote it).
SELECT id, host, pid, queues, concurrency, in_hand, running, started_at, beat_at, now() AS db_now
FROM shardq_workers ORDER BY host, pid, id LIMIT %(limit)s::INT8

-- name: worker_by_token
-- The worker whose claims in hand include the lease token (a leased task's worker), if registered.
SELECT id, host, pid, beat_at FROM shardq_workers WHERE %(token)s::UUID = ANY(tokens) LIMIT 1
