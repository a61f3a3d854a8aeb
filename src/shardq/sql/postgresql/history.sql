-- Acks of queues that keep finished tasks (shardq.lifecycle.history), PostgreSQL: the ack statements of
-- tasks.sql with the history rows written by the same statement (one round trip, autocommit, as
-- the plain acks), for the rows the fenced DELETE removed only. The enqueue time and attempts come
-- from the deleted rows; the task name, run time and result travel as arrays keyed by id. notify:
-- chunks of ids for outcome waiters (shardq.lifecycle.waiting), an empty array when nobody listens.

-- name: task_ack_claim_kept
-- task_ack_claim (tasks.sql), recording each task it deleted.
WITH done AS (
    DELETE FROM shardq_tasks AS t
    WHERE t.bucket = %(bucket)s AND t.queue = %(queue)s
      AND (t.rank, t.exec_time, t.id) >= (%(first_rank)s::INT8, %(first_exec)s::TIMESTAMPTZ, %(first_id)s::UUID)
      AND (t.rank, t.exec_time, t.id) <= (%(last_rank)s::INT8, %(last_exec)s::TIMESTAMPTZ, %(last_id)s::UUID)
      AND t.lease_token = %(token)s::UUID AND t.state = 'leased'
    RETURNING t.id, t.created_at, t.attempts, t.dedupe_key
), closed AS (
    DELETE FROM shardq_leases WHERE token = %(token)s::UUID
), kept AS (
    INSERT INTO shardq_history (id, queue, state, task, created_at, attempts, run_seconds, result, dedupe_key)
    SELECT d.id, %(queue)s, 'succeeded', k.task, d.created_at, d.attempts, k.run_seconds, k.result, d.dedupe_key
    FROM done AS d
    JOIN unnest(%(ids)s::UUID[], %(tasks)s::TEXT[], %(run_seconds)s::FLOAT8[], %(results)s::TEXT[])
         AS k(id, task, run_seconds, result) ON k.id = d.id
    ON CONFLICT (id) DO UPDATE SET queue = excluded.queue, state = excluded.state, task = excluded.task,
        created_at = excluded.created_at, finished_at = excluded.finished_at, attempts = excluded.attempts,
        run_seconds = excluded.run_seconds, last_error = NULL, result = excluded.result,
        dedupe_key = excluded.dedupe_key
)
SELECT count(*) AS acked, CASE WHEN count(*) < %(expected)s::INT4 THEN coalesce(array_agg(id), '{}') END AS ids,
       (SELECT count(pg_notify('shardq_done', c)) FROM unnest(%(notify)s::TEXT[]) AS c) AS notified
FROM done

-- name: task_ack_many_kept
-- task_ack_many (tasks.sql), recording each task it deleted.
WITH done AS (
    DELETE FROM shardq_tasks AS t
    USING unnest(%(buckets)s::INT4[], %(queues)s::TEXT[], %(ranks)s::INT8[], %(exec_times)s::TIMESTAMPTZ[],
                 %(ids)s::UUID[], %(tokens)s::UUID[], %(states)s::TEXT[])
                 AS k(bucket, queue, rank, exec_time, id, token, state)
    WHERE t.bucket = k.bucket AND t.queue = k.queue AND t.rank = k.rank AND t.exec_time = k.exec_time
      AND t.id = k.id AND t.lease_token = k.token AND t.state = k.state AND t.id = ANY(%(ids)s::UUID[])
    RETURNING t.id, t.queue, t.created_at, t.attempts, t.dedupe_key
), closed AS (
    DELETE FROM shardq_leases WHERE token = ANY(%(closed_tokens)s::UUID[])
), kept AS (
    INSERT INTO shardq_history (id, queue, state, task, created_at, attempts, run_seconds, result, dedupe_key)
    SELECT d.id, d.queue, 'succeeded', r.task, d.created_at, d.attempts, r.run_seconds, r.result, d.dedupe_key
    FROM done AS d
    JOIN unnest(%(ids)s::UUID[], %(tasks)s::TEXT[], %(run_seconds)s::FLOAT8[], %(results)s::TEXT[])
         AS r(id, task, run_seconds, result) ON r.id = d.id
    ON CONFLICT (id) DO UPDATE SET queue = excluded.queue, state = excluded.state, task = excluded.task,
        created_at = excluded.created_at, finished_at = excluded.finished_at, attempts = excluded.attempts,
        run_seconds = excluded.run_seconds, last_error = NULL, result = excluded.result,
        dedupe_key = excluded.dedupe_key
)
SELECT id, (SELECT count(pg_notify('shardq_done', c)) FROM unnest(%(notify)s::TEXT[]) AS c) AS notified
FROM done
