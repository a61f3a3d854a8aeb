-- Acks of queues that keep finished tasks (shardq.lifecycle.history), CockroachDB: task_ack_many
-- (tasks.sql) with the history rows written by the same statement, for the rows the fenced DELETE
-- removed only (one statement, autocommit: the server retries its 40001s as for the plain ack).
-- Each statement changes shardq_tasks once and shardq_history once. No notification: CockroachDB
-- has no LISTEN/NOTIFY, outcome waiters poll (shardq.lifecycle.waiting).

-- name: task_ack_many_kept
-- task_ack_many (tasks.sql), recording each task it deleted.
WITH done AS (
    DELETE FROM shardq_tasks AS t
    USING unnest(%(states)s::STRING[], %(queues)s::STRING[], %(ranks)s::INT8[], %(exec_times)s::TIMESTAMPTZ[],
                 %(ids)s::UUID[], %(tokens)s::UUID[]) AS k(state, queue, rank, exec_time, id, token)
    WHERE t.state = k.state AND t.queue = k.queue AND t.rank = k.rank AND t.exec_time = k.exec_time
      AND t.id = k.id AND t.lease_token = k.token
    RETURNING t.id, t.queue, t.created_at, t.attempts, t.dedupe_key
), kept AS (
    INSERT INTO shardq_history (id, queue, state, task, created_at, attempts, run_seconds, result, dedupe_key)
    SELECT d.id, d.queue, 'succeeded', r.task, d.created_at, d.attempts, r.run_seconds, r.result, d.dedupe_key
    FROM done AS d
    JOIN unnest(%(ids)s::UUID[], %(tasks)s::STRING[], %(run_seconds)s::FLOAT8[], %(results)s::STRING[])
         AS r(id, task, run_seconds, result) ON r.id = d.id
    ON CONFLICT (id) DO UPDATE SET queue = excluded.queue, state = excluded.state, task = excluded.task,
        created_at = excluded.created_at, finished_at = excluded.finished_at, attempts = excluded.attempts,
        run_seconds = excluded.run_seconds, last_error = NULL, result = excluded.result,
        dedupe_key = excluded.dedupe_key
    RETURNING id
)
-- kept is read here so its insert runs whatever the engine does with an unread mutation.
SELECT d.id, k.id IS NOT NULL AS recorded FROM done AS d LEFT JOIN kept AS k ON k.id = d.id
