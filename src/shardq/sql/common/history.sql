-- Task history (migration 0008): finished tasks of queues that keep them (shardq_history) and
-- their failed attempts (shardq_attempts). Rows are written only for queues whose
-- keep_finished_seconds > 0, in the transaction of the ack, dead-letter or cancel that finished the
-- task, and only for the ids that fenced statement actually removed (a stale lease's outcome is
-- never recorded). Both tables are keyed by the task id (a random UUID): writes spread. The acks'
-- own statements, which write their history rows themselves, are per engine
-- (sql/postgresql/history.sql, sql/cockroachdb/history.sql).

-- name: history_record_dead
-- Record tasks just moved to the dead letters, from their dead-letter rows (the reaper does not
-- read payloads or enqueue times; the dead letter has them); task names and run times when known.
INSERT INTO shardq_history (id, queue, state, task, created_at, attempts, run_seconds, last_error, dedupe_key)
SELECT d.id, d.queue, 'dead', k.task, d.created_at, d.attempts, k.run_seconds, d.last_error, d.dedupe_key
FROM unnest(%(ids)s::UUID[], %(tasks)s::TEXT[], %(run_seconds)s::FLOAT8[]) AS k(id, task, run_seconds)
JOIN shardq_dead AS d ON d.id = k.id
ON CONFLICT (id) DO UPDATE SET queue = excluded.queue, state = excluded.state, task = excluded.task,
    created_at = excluded.created_at, finished_at = excluded.finished_at, attempts = excluded.attempts,
    run_seconds = excluded.run_seconds, last_error = excluded.last_error, result = NULL,
    dedupe_key = excluded.dedupe_key

-- name: history_record_cancelled
-- Record cancelled tasks, only those of queues that keep finished tasks (cancelling is an
-- operator's act, not the hot path: the queue's setting is read here rather than passed in).
INSERT INTO shardq_history (id, queue, state, task, created_at, attempts, last_error, dedupe_key)
SELECT k.id, k.queue, 'cancelled', k.task, k.created_at, k.attempts, k.last_error, k.dedupe_key
FROM unnest(%(ids)s::UUID[], %(queues)s::TEXT[], %(tasks)s::TEXT[], %(created_ats)s::TIMESTAMPTZ[],
            %(attempts)s::INT4[], %(errors)s::TEXT[], %(dedupe_keys)s::TEXT[])
     AS k(id, queue, task, created_at, attempts, last_error, dedupe_key)
JOIN shardq_queues AS q ON q.name = k.queue
WHERE q.keep_finished_seconds > 0
ON CONFLICT (id) DO UPDATE SET queue = excluded.queue, state = excluded.state, task = excluded.task,
    created_at = excluded.created_at, finished_at = excluded.finished_at, attempts = excluded.attempts,
    run_seconds = NULL, last_error = excluded.last_error, result = NULL, dedupe_key = excluded.dedupe_key

-- name: attempt_record_many
-- Record failed attempts that were put back to retry (one row per task and attempt number; an
-- attempt recorded already, by a re-sent statement, stays as it is).
INSERT INTO shardq_attempts (task_id, attempt, queue, run_seconds, error)
SELECT k.task_id, k.attempt, k.queue, k.run_seconds, k.error
FROM unnest(%(ids)s::UUID[], %(attempts)s::INT4[], %(queues)s::TEXT[], %(run_seconds)s::FLOAT8[],
            %(errors)s::TEXT[]) AS k(task_id, attempt, queue, run_seconds, error)
ON CONFLICT (task_id, attempt) DO NOTHING

-- name: task_status_read
-- Everything a task's status reads, in one round trip: its live row ('task', through the tasks'
-- unique id index), its history row ('history') and its dead letter ('dead', primary keys), and
-- its failed attempts ('attempt', a primary-key prefix scan), and a durable task's progress and
-- pending wait ('durable': its step rows at index -1 and with no value yet, a primary-key prefix
-- scan of shardq_task_steps; name in the task column, index in attempts, value in result). The caller takes the live row,
-- else the history row, else the dead letter; no row at all is an unknown id. Columns a source
-- does not have are NULL; finished_at is a history row's finish, a dead letter's death and an
-- attempt's end; attempts is an attempt's own number.
SELECT 'task' AS source, t.id, t.queue, t.state, NULL::TEXT AS task, t.payload, t.backlogged, t.attempts,
       t.exec_time, t.created_at, NULL::TIMESTAMPTZ AS finished_at, NULL::FLOAT8 AS run_seconds, t.last_error,
       NULL::TEXT AS result
FROM shardq_tasks AS t WHERE t.id = %(id)s::UUID
UNION ALL
SELECT 'history', h.id, h.queue, h.state, h.task, NULL::BYTEA, NULL::BOOL, h.attempts, NULL::TIMESTAMPTZ,
       h.created_at, h.finished_at, h.run_seconds, h.last_error, h.result
FROM shardq_history AS h WHERE h.id = %(id)s::UUID
UNION ALL
SELECT 'dead', d.id, d.queue, NULL::TEXT, NULL::TEXT, d.payload, NULL::BOOL, d.attempts, NULL::TIMESTAMPTZ,
       d.created_at, d.died_at, NULL::FLOAT8, d.last_error, NULL::TEXT
FROM shardq_dead AS d WHERE d.id = %(id)s::UUID
UNION ALL
SELECT 'attempt', a.task_id, a.queue, NULL::TEXT, NULL::TEXT, NULL::BYTEA, NULL::BOOL, a.attempt, NULL::TIMESTAMPTZ,
       NULL::TIMESTAMPTZ, a.ended_at, a.run_seconds, a.error, NULL::TEXT
FROM shardq_attempts AS a WHERE a.task_id = %(id)s::UUID
UNION ALL
SELECT 'durable', s.task_id, NULL::TEXT, NULL::TEXT, s.name, NULL::BYTEA, NULL::BOOL, s.idx, NULL::TIMESTAMPTZ,
       NULL::TIMESTAMPTZ, s.wake_at, NULL::FLOAT8, NULL::TEXT, s.value
FROM shardq_task_steps AS s WHERE s.task_id = %(id)s::UUID AND (s.idx = -1 OR s.value IS NULL)

-- name: history_list
-- A page of a queue's finished tasks, newest first, after the keyset (after_at, after_id) when
-- given; optional filters by state and by a lower bound on the finish time.
SELECT id, queue, state, task, created_at, finished_at, attempts, run_seconds, last_error, result
FROM shardq_history
WHERE queue = %(queue)s
  AND (%(state)s::TEXT IS NULL OR state = %(state)s::TEXT)
  AND (%(since)s::TIMESTAMPTZ IS NULL OR finished_at >= %(since)s::TIMESTAMPTZ)
  AND (%(after_at)s::TIMESTAMPTZ IS NULL
       OR (finished_at, id) < (%(after_at)s::TIMESTAMPTZ, %(after_id)s::UUID))
ORDER BY finished_at DESC, id DESC
LIMIT %(limit)s

-- name: history_prune
-- Delete up to limit history rows of one queue that finished more than keep_seconds ago; called
-- until it deletes fewer.
DELETE FROM shardq_history
WHERE id IN (
    SELECT id FROM shardq_history
    WHERE queue = %(queue)s AND finished_at < now() - %(keep_seconds)s::FLOAT8 * INTERVAL '1 second'
    LIMIT %(limit)s
)
RETURNING id

-- name: attempts_prune
-- Delete up to limit failed-attempt rows of one queue that ended more than keep_seconds ago.
DELETE FROM shardq_attempts
WHERE (task_id, attempt) IN (
    SELECT task_id, attempt FROM shardq_attempts
    WHERE queue = %(queue)s AND ended_at < now() - %(keep_seconds)s::FLOAT8 * INTERVAL '1 second'
    LIMIT %(limit)s
)
RETURNING task_id

-- name: outcome_listener_seen
-- This process listens for outcome notifications (shardq.lifecycle.waiting): insert or renew its row.
INSERT INTO shardq_listeners (id) VALUES (%(id)s::UUID)
ON CONFLICT (id) DO UPDATE SET seen_at = now()

-- name: outcome_listener_gone
-- This process stopped listening; rows of listeners that died without saying so go too (a few at
-- a time: they are already ignored once stale).
DELETE FROM shardq_listeners
WHERE id = %(id)s::UUID
   OR id IN (SELECT id FROM shardq_listeners
             WHERE seen_at < now() - %(stale_seconds)s::FLOAT8 * INTERVAL '1 second' LIMIT 100)

-- name: outcome_listeners_present
-- Whether any process listened for outcome notifications within fresh_seconds (one row read at most).
SELECT count(*) AS present
FROM (SELECT 1 FROM shardq_listeners
      WHERE seen_at > now() - %(fresh_seconds)s::FLOAT8 * INTERVAL '1 second' LIMIT 1) AS l

-- name: history_dedupe_recent
-- The dedupe keys of a queue whose task finished within its window (dedupe_for, seconds per key):
-- one descent of the dedupe index per key.
SELECT DISTINCT h.dedupe_key
FROM unnest(%(keys)s::TEXT[], %(seconds)s::FLOAT8[]) AS k(key, secs)
JOIN shardq_history AS h ON h.queue = %(queue)s AND h.dedupe_key = k.key
WHERE h.dedupe_key IS NOT NULL AND h.finished_at > now() - k.secs * INTERVAL '1 second'

-- name: history_browse
-- The dashboard's finished tab: one bounded scan of a queue's history, newest first, after the
-- keyset (after_at, after_id) and not before since when given: at most scan index entries of
-- shardq_history_by_queue, whatever the filters (state, error_like: an ILIKE pattern the caller
-- escapes), which are applied to what the scan read (hit) so a selective filter never makes the
-- scan longer. The same ordered, limited walk of the same index as history_list.
SELECT id, state, task, created_at, finished_at, attempts, run_seconds, last_error,
       (%(state)s::TEXT IS NULL OR state = %(state)s::TEXT)
       AND (%(error_like)s::TEXT IS NULL OR last_error ILIKE %(error_like)s::TEXT) AS hit
FROM shardq_history
WHERE queue = %(queue)s
  AND (%(since)s::TIMESTAMPTZ IS NULL OR finished_at >= %(since)s::TIMESTAMPTZ)
  AND (%(after_at)s::TIMESTAMPTZ IS NULL
       OR (finished_at, id) < (%(after_at)s::TIMESTAMPTZ, %(after_id)s::UUID))
ORDER BY finished_at DESC, id DESC
LIMIT %(scan)s::INT8
