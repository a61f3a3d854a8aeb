-- name: task_insert_many_fresh
-- PostgreSQL's task_insert_many_fresh (the insert is sql/common/enqueue.sql's: keep them in step)
-- that can also wake the queue's listening workers (wake true: pg_notify, delivered when the insert
-- commits, like a NOTIFY sent after it) in the same round trip. A producer that sent its wake-up as
-- a statement of its own paid a second round trip for every enqueue it woke workers for, which kept
-- the wake-up throttle long (50 ms) and the tasks enqueued in between waiting for a poll
-- (docs/latency.md). Returns one row, paused: when true, nothing was inserted and nobody is woken.
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
SELECT s.paused, CASE WHEN %(wake)s::BOOL AND NOT s.paused THEN pg_notify('shardq_wake', %(queue)s) IS NULL END AS woken
FROM settings AS s
