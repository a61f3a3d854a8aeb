-- name: task_insert_many
-- (All task_insert_* statements: an optional column's array may be NULL when no task of the batch
-- sets it, on PostgreSQL; unnest pads it with NULLs, which mean the default.)
-- Enqueue a batch into one queue in one statement (parallel arrays through unnest); creates the
-- queue on first use. A task due now is 'ready' with rank = its priority; one due later is
-- 'scheduled' with rank = scheduled_rank. A row that hits any unique index is skipped: a live dedupe
-- key (a duplicate), or an exclusive key that already has an active task (the caller then puts it
-- in the backlog). Returns the ids that were skipped, usually none (so nothing is decoded per
-- task); when the queue is paused for enqueue nothing is inserted and one row with paused = true
-- says so. The bucket (PostgreSQL column default) or shard (CockroachDB hidden column) is assigned
-- by the database.
WITH settings AS (
    SELECT coalesce((SELECT q.paused_enqueue FROM shardq_queues AS q WHERE q.name = %(queue)s), false) AS paused,
           coalesce((SELECT q.max_attempts FROM shardq_queues AS q WHERE q.name = %(queue)s), %(max_attempts_default)s::INT4) AS max_attempts
), new_queue AS (
    INSERT INTO shardq_queues (name) VALUES (%(queue)s) ON CONFLICT (name) DO NOTHING
    RETURNING name
), incoming AS (
    SELECT n.id, n.payload, n.max_attempts, n.dedupe_key, coalesce(n.priority, 0) AS priority, n.exclusive_key,
           coalesce(n.run_at, now() + coalesce(n.delay, 0) * INTERVAL '1 second') AS due
    FROM unnest(%(ids)s::UUID[], %(payloads)s::BYTEA[], %(delays)s::FLOAT8[], %(run_ats)s::TIMESTAMPTZ[],
                %(max_attempts)s::INT4[], %(dedupe_keys)s::TEXT[], %(priorities)s::INT8[],
                %(exclusive_keys)s::TEXT[])
         AS n(id, payload, delay, run_at, max_attempts, dedupe_key, priority, exclusive_key)
), inserted AS (
    INSERT INTO shardq_tasks (state, rank, queue, exec_time, id, priority, exclusive_key, attempts, max_attempts,
                              payload, dedupe_key)
    SELECT CASE WHEN i.due > now() THEN 'scheduled' ELSE 'ready' END,
           CASE WHEN i.due > now() THEN %(scheduled_rank)s ELSE i.priority END,
           %(queue)s, i.due, i.id, i.priority, i.exclusive_key, 0,
           coalesce(i.max_attempts, (SELECT max_attempts FROM settings)), i.payload, i.dedupe_key
    FROM incoming AS i
    WHERE NOT (SELECT paused FROM settings)
    ON CONFLICT DO NOTHING
    RETURNING id
)
SELECT i.id, false AS paused FROM incoming AS i
WHERE NOT (SELECT paused FROM settings) AND i.id NOT IN (SELECT id FROM inserted)
UNION ALL
SELECT NULL, true FROM settings WHERE paused

-- name: task_insert_many_fresh
-- task_insert_many for a batch in which no task carries a dedupe or an exclusive key (the common
-- case): a plain INSERT without ON CONFLICT, so without speculative insertion, which made the
-- statement about a fifth slower per task. Nothing can conflict but a repeated id, which only a
-- broken uuid4 could produce and which is then an error. Returns one row, paused: when true,
-- nothing was inserted.
WITH settings AS (
    SELECT coalesce((SELECT q.paused_enqueue FROM shardq_queues AS q WHERE q.name = %(queue)s), false) AS paused,
           coalesce((SELECT q.max_attempts FROM shardq_queues AS q WHERE q.name = %(queue)s), %(max_attempts_default)s::INT4) AS max_attempts
), new_queue AS (
    INSERT INTO shardq_queues (name) VALUES (%(queue)s) ON CONFLICT (name) DO NOTHING
    RETURNING name
), inserted AS (
    INSERT INTO shardq_tasks (state, rank, queue, exec_time, id, priority, attempts, max_attempts, payload)
    SELECT CASE WHEN i.due > now() THEN 'scheduled' ELSE 'ready' END,
           CASE WHEN i.due > now() THEN %(scheduled_rank)s ELSE i.priority END,
           %(queue)s, i.due, i.id, i.priority, 0, coalesce(i.max_attempts, (SELECT max_attempts FROM settings)),
           i.payload
    FROM (
        SELECT n.id, n.payload, n.max_attempts, coalesce(n.priority, 0) AS priority, coalesce(n.run_at, now() + coalesce(n.delay, 0) * INTERVAL '1 second') AS due
        FROM unnest(%(ids)s::UUID[], %(payloads)s::BYTEA[], %(delays)s::FLOAT8[], %(run_ats)s::TIMESTAMPTZ[],
                    %(max_attempts)s::INT4[], %(priorities)s::INT8[])
             AS n(id, payload, delay, run_at, max_attempts, priority)
    ) AS i
    WHERE NOT (SELECT paused FROM settings)
    RETURNING id
)
SELECT paused FROM settings

-- name: task_insert_backlog_many
-- Put tasks whose exclusive key is busy into that key's backlog (run only under exclusive_keys_lock).
-- A live dedupe key still makes a row a duplicate (skipped).
INSERT INTO shardq_tasks (state, rank, queue, exec_time, id, priority, exclusive_key, backlogged, attempts,
                          max_attempts, payload, dedupe_key)
SELECT 'backlog', %(backlog_rank)s, %(queue)s, coalesce(n.run_at, now() + coalesce(n.delay, 0) * INTERVAL '1 second'), n.id,
       coalesce(n.priority, 0), n.exclusive_key, true, 0,
       coalesce(n.max_attempts, (SELECT q.max_attempts FROM shardq_queues AS q WHERE q.name = %(queue)s), %(max_attempts_default)s::INT4),
       n.payload, n.dedupe_key
FROM unnest(%(ids)s::UUID[], %(payloads)s::BYTEA[], %(delays)s::FLOAT8[], %(run_ats)s::TIMESTAMPTZ[],
            %(max_attempts)s::INT4[], %(dedupe_keys)s::TEXT[], %(priorities)s::INT8[], %(exclusive_keys)s::TEXT[])
     AS n(id, payload, delay, run_at, max_attempts, dedupe_key, priority, exclusive_key)
ON CONFLICT DO NOTHING
RETURNING id

-- name: task_exclusive_active
-- Which of these exclusive keys of a queue have an active (non-backlog) task right now.
SELECT exclusive_key FROM shardq_tasks
WHERE queue = %(queue)s AND exclusive_key = ANY(%(keys)s::TEXT[]) AND NOT backlogged

-- name: task_backlog_supersede
-- Latest-only queues: drop older backlog entries of these keys, keeping the ones just added.
DELETE FROM shardq_tasks
WHERE backlogged AND queue = %(queue)s AND exclusive_key = ANY(%(keys)s::TEXT[]) AND id <> ALL(%(keep)s::UUID[])
RETURNING id

-- name: task_cancel_many
-- Delete tasks by id whatever their state (ready, scheduled, backlog or leased: a leased task's
-- worker then finds its token gone and its outcome changes nothing). Returns what was removed so
-- the caller can release exclusive keys, cancel workflow steps, and what the history records of it.
DELETE FROM shardq_tasks
WHERE id = ANY(%(ids)s::UUID[])
RETURNING id, queue, state, exclusive_key, backlogged, payload, created_at, attempts, last_error, dedupe_key,
          workflow_id

-- name: task_exclusive_keys_by_id
-- The exclusive keys of the named tasks (those that have one), so they can be locked first.
SELECT id, queue, exclusive_key FROM shardq_tasks
WHERE id = ANY(%(ids)s::UUID[]) AND exclusive_key IS NOT NULL
