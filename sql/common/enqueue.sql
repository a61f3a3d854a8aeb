-- name: task_insert_many
-- Enqueue a batch into one queue in one statement (parallel arrays through unnest); creates the
-- queue on first use. A row whose dedupe key is already live is skipped: RETURNING lists only the
-- ids actually inserted, so the caller can tell enqueued from duplicate. The bucket (PostgreSQL
-- column default) or shard (CockroachDB hidden column) is assigned by the database.
WITH new_queue AS (
    INSERT INTO shardq_queues (name) VALUES (%(queue)s) ON CONFLICT (name) DO NOTHING
)
INSERT INTO shardq_tasks (state, queue, exec_time, id, attempts, max_attempts, payload, dedupe_key)
SELECT 'ready',
       %(queue)s,
       coalesce(n.run_at, now() + n.delay * INTERVAL '1 second'),
       n.id,
       0,
       coalesce(n.max_attempts, (SELECT q.max_attempts FROM shardq_queues AS q WHERE q.name = %(queue)s), 25),
       n.payload,
       n.dedupe_key
FROM unnest(%(ids)s::UUID[], %(payloads)s::BYTEA[], %(delays)s::FLOAT8[], %(run_ats)s::TIMESTAMPTZ[],
            %(max_attempts)s::INT4[], %(dedupe_keys)s::TEXT[])
     AS n(id, payload, delay, run_at, max_attempts, dedupe_key)
ON CONFLICT (queue, dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
RETURNING id
