-- Durable execution (docs/durable.md, migration 0021): a task's recorded steps and the signals sent
-- to it. The statements that write a step are fenced by the task's lease token in their own
-- statement (the `fence` CTE of the engine's files: a no-op UPDATE of the task row by whole key and
-- token, which takes the row's lock, so a write by a worker whose lease passed to another inserts
-- nothing); they are per engine because the key is. The ones here address rows by task id only.

-- name: task_steps_read
-- The recorded steps of one task in order (its primary key's prefix: one range read), with whether
-- each sleep or wait has reached its wake time on the server's clock. Index -1 is the task's
-- progress (ctx.progress), not a step.
SELECT idx, name, value, version, wake_at, coalesce(wake_at <= now(), false) AS due
FROM shardq_task_steps
WHERE task_id = %(task_id)s::UUID AND idx >= 0
ORDER BY idx

-- name: task_signal_lock
-- The first statement of a signal's transaction: lock the live task by id (the unique id index)
-- with a no-op update, so that a task parking for a wait at the same moment runs wholly before or
-- wholly after this transaction (see durable.md, "Signals"). No row: no live task by that id.
UPDATE shardq_tasks SET lease_token = lease_token
WHERE id = %(task_id)s::UUID
RETURNING id, queue, state

-- name: task_signal_insert
-- Store one signal for a task; its id is the sender's idempotency key (or a fresh UUID), so a
-- sender's retry of the same signal inserts nothing, even after it was consumed.
INSERT INTO shardq_task_signals (task_id, name, id, payload)
VALUES (%(task_id)s::UUID, %(name)s::TEXT, %(id)s::UUID, %(payload)s::TEXT)
ON CONFLICT (task_id, name, id) DO NOTHING
RETURNING id

-- name: task_signal_wake
-- Make a task that is parked waiting for this signal due now (ready, at its priority). Only a
-- scheduled task with a pending wait step of this name (value NULL) is touched: a task scheduled
-- for any other reason stays where it is. A separate statement after task_signal_lock, so it
-- reads what committed before that lock was granted.
UPDATE shardq_tasks AS t
SET state = 'ready', rank = t.priority, exec_time = now()
WHERE t.id = %(task_id)s::UUID AND t.state = 'scheduled'
  AND EXISTS (SELECT 1 FROM shardq_task_steps AS w
              WHERE w.task_id = %(task_id)s::UUID AND w.name = %(wait_step)s::TEXT AND w.value IS NULL)
RETURNING t.queue

-- name: task_signal_pending
-- Whether an unconsumed signal of this name waits for the task (read inside a parking transaction,
-- after its fenced write locked the task row).
SELECT count(*) AS pending FROM shardq_task_signals
WHERE task_id = %(task_id)s::UUID AND name = %(name)s::TEXT AND consumed_at IS NULL

-- name: task_steps_prune
-- Delete, in a bounded batch, the recorded steps of tasks that are neither live nor dead (acked,
-- cancelled, purged): a dead task keeps its steps, so that requeueing it resumes where it stopped.
DELETE FROM shardq_task_steps
WHERE task_id IN (
    SELECT s.task_id FROM shardq_task_steps AS s
    WHERE NOT EXISTS (SELECT 1 FROM shardq_tasks AS t WHERE t.id = s.task_id)
      AND NOT EXISTS (SELECT 1 FROM shardq_dead AS d WHERE d.id = s.task_id)
    LIMIT %(limit)s
)
RETURNING task_id

-- name: task_signals_prune
-- Delete, in a bounded batch, the signals of tasks that are neither live nor dead.
DELETE FROM shardq_task_signals
WHERE task_id IN (
    SELECT s.task_id FROM shardq_task_signals AS s
    WHERE NOT EXISTS (SELECT 1 FROM shardq_tasks AS t WHERE t.id = s.task_id)
      AND NOT EXISTS (SELECT 1 FROM shardq_dead AS d WHERE d.id = s.task_id)
    LIMIT %(limit)s
)
RETURNING task_id

-- name: task_lease_held
-- Whether this run still holds its task (ctx.cancelled): the row by id (the unique id index) and
-- whether its lease token is still the run's. No row: cancelled (or finished).
SELECT lease_token = %(token)s::UUID AS held FROM shardq_tasks WHERE id = %(task_id)s::UUID
