-- Durable execution's fenced statements (see sql/common/durable.sql). Each names the task by whole
-- key and lease token, as the settling statements of tasks.sql do, in the `fence` CTE or the UPDATE's
-- own FROM; a stale token matches no row and the statement writes nothing.

-- name: task_step_record
-- Record one completed step (its JSON text, or a sleep's wake time) if this run still holds the
-- task's lease: the fence's row lock makes a concurrent claim or reap wait (or skip) until this
-- commits, and a token that has passed to another worker inserts nothing. A row already at this
-- index is the run's own pending wait, answered here (a timeout).
WITH fence AS (
    UPDATE shardq_tasks AS t SET lease_token = t.lease_token
    FROM unnest(%(states)s::STRING[], %(queues)s::STRING[], %(ranks)s::INT8[], %(exec_times)s::TIMESTAMPTZ[],
                %(ids)s::UUID[], %(tokens)s::UUID[]) AS k(state, queue, rank, exec_time, id, token)
    WHERE t.state = k.state AND t.queue = k.queue AND t.rank = k.rank AND t.exec_time = k.exec_time
      AND t.id = k.id AND t.lease_token = k.token
    RETURNING t.id
)
INSERT INTO shardq_task_steps (task_id, idx, name, value, version, wake_at)
SELECT f.id, %(idx)s::INT4, %(name)s::STRING, %(value)s::STRING, %(version)s::STRING, %(wake_at)s::TIMESTAMPTZ
FROM fence AS f
ON CONFLICT (task_id, idx) DO UPDATE
SET name = excluded.name, value = excluded.value, version = excluded.version, wake_at = excluded.wake_at,
    recorded_at = excluded.recorded_at
RETURNING idx

-- name: task_wait_begin
-- A wait's pending step (value NULL, wake_at its timeout), fenced; kept as it is when the run
-- resumes a wait it began before. Returns the row as stored and whether its timeout has passed.
WITH fence AS (
    UPDATE shardq_tasks AS t SET lease_token = t.lease_token
    FROM unnest(%(states)s::STRING[], %(queues)s::STRING[], %(ranks)s::INT8[], %(exec_times)s::TIMESTAMPTZ[],
                %(ids)s::UUID[], %(tokens)s::UUID[]) AS k(state, queue, rank, exec_time, id, token)
    WHERE t.state = k.state AND t.queue = k.queue AND t.rank = k.rank AND t.exec_time = k.exec_time
      AND t.id = k.id AND t.lease_token = k.token
    RETURNING t.id
)
INSERT INTO shardq_task_steps (task_id, idx, name, value, version, wake_at)
SELECT f.id, %(idx)s::INT4, %(name)s::STRING, NULL, %(version)s::STRING, %(wake_at)s::TIMESTAMPTZ
FROM fence AS f
ON CONFLICT (task_id, idx) DO UPDATE SET name = shardq_task_steps.name
RETURNING idx, value, wake_at, coalesce(wake_at <= now(), false) AS due

-- name: task_signal_consume
-- Consume the oldest unconsumed signal of this name and answer the pending wait step with it, in
-- one fenced statement: the signal is marked consumed only where the step is written, so it is
-- consumed once, by the run holding the lease. The step's value is {"payload": <the signal's JSON>}.
WITH fence AS (
    UPDATE shardq_tasks AS t SET lease_token = t.lease_token
    FROM unnest(%(states)s::STRING[], %(queues)s::STRING[], %(ranks)s::INT8[], %(exec_times)s::TIMESTAMPTZ[],
                %(ids)s::UUID[], %(tokens)s::UUID[]) AS k(state, queue, rank, exec_time, id, token)
    WHERE t.state = k.state AND t.queue = k.queue AND t.rank = k.rank AND t.exec_time = k.exec_time
      AND t.id = k.id AND t.lease_token = k.token
    RETURNING t.id
), taken AS (
    UPDATE shardq_task_signals AS s SET consumed_at = now()
    WHERE s.task_id = %(task_id)s::UUID AND s.name = %(signal)s::STRING AND s.consumed_at IS NULL
      AND s.id = (SELECT o.id FROM shardq_task_signals AS o
                  WHERE o.task_id = %(task_id)s::UUID AND o.name = %(signal)s::STRING AND o.consumed_at IS NULL
                  ORDER BY o.sent_at, o.id LIMIT 1)
      AND EXISTS (SELECT 1 FROM fence)
    RETURNING s.task_id, s.payload
)
INSERT INTO shardq_task_steps (task_id, idx, name, value, version, wake_at)
SELECT s.task_id, %(idx)s::INT4, %(name)s::STRING, '{"payload": ' || s.payload || '}', %(version)s::STRING, NULL
FROM taken AS s
ON CONFLICT (task_id, idx) DO UPDATE SET value = excluded.value
RETURNING value

-- name: task_steps_clear
-- Forget a task's recorded steps (its declared version changed: start afresh), fenced.
WITH fence AS (
    UPDATE shardq_tasks AS t SET lease_token = t.lease_token
    FROM unnest(%(states)s::STRING[], %(queues)s::STRING[], %(ranks)s::INT8[], %(exec_times)s::TIMESTAMPTZ[],
                %(ids)s::UUID[], %(tokens)s::UUID[]) AS k(state, queue, rank, exec_time, id, token)
    WHERE t.state = k.state AND t.queue = k.queue AND t.rank = k.rank AND t.exec_time = k.exec_time
      AND t.id = k.id AND t.lease_token = k.token
    RETURNING t.id
)
DELETE FROM shardq_task_steps AS s
WHERE s.task_id = %(task_id)s::UUID AND EXISTS (SELECT 1 FROM fence)
RETURNING s.idx

-- name: task_park
-- End this run without using an attempt: the leased task goes back to scheduled at wake_at (ready
-- now when wake_at has passed: a signal came), holding no lease; fenced by token like
-- task_retry_many, with the attempt the claim charged given back and what it waits for as its
-- last error (what `shardq task` shows).
UPDATE shardq_tasks AS t
SET state = CASE WHEN %(wake_at)s::TIMESTAMPTZ > now() THEN 'scheduled' ELSE 'ready' END,
    rank = CASE WHEN %(wake_at)s::TIMESTAMPTZ > now() THEN %(scheduled_rank)s ELSE t.priority END,
    exec_time = CASE WHEN %(wake_at)s::TIMESTAMPTZ > now() THEN %(wake_at)s::TIMESTAMPTZ ELSE now() END,
    lease_token = NULL,
    lease_expires_at = NULL,
    attempts = t.attempts - 1,
    last_error = %(reason)s::STRING
FROM unnest(%(states)s::STRING[], %(queues)s::STRING[], %(ranks)s::INT8[], %(exec_times)s::TIMESTAMPTZ[],
            %(ids)s::UUID[], %(tokens)s::UUID[]) AS k(state, queue, rank, exec_time, id, token)
WHERE t.state = k.state AND t.queue = k.queue AND t.rank = k.rank AND t.exec_time = k.exec_time
  AND t.id = k.id AND t.lease_token = k.token
RETURNING t.id
