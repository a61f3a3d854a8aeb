-- Spark then=: the callback of a Spark run, released once every task of the run succeeded
-- (shardq.workflows.spark_callbacks). The callback is the one step of a workflow of its own; the run's tasks
-- carry the run's mark (run_mark) in shardq_tasks.workflow_id without being steps.

-- name: spark_callback_register
-- A run's callback, unless the run has one already (a re-run keeps the first attempt's). Returns the
-- row only when this call inserted it: then the caller writes the workflow and its waiting step in
-- the same transaction. On a conflict no row comes back, on CockroachDB too (cockroachdb/cockroach
-- pkg/sql/logictest/testdata/logic_test/upsert, "Handle INSERT ... ON CONFLICT DO NOTHING ...
-- RETURNING": only the inserted row is returned).
INSERT INTO shardq_spark_callbacks (run_id, run_mark, workflow_id, step)
VALUES (%(run_id)s::TEXT, %(run_mark)s::UUID, %(workflow_id)s::UUID, %(step)s::TEXT)
ON CONFLICT (run_id) DO NOTHING
RETURNING run_id

-- name: spark_callback_get
-- A run's callback: the run's mark, the callback's workflow, its step's name and state, and whether
-- the run is fully enqueued.
SELECT c.run_id, c.run_mark, c.workflow_id, c.step, c.complete, s.state
FROM shardq_spark_callbacks AS c
LEFT JOIN shardq_workflow_steps AS s ON s.workflow_id = c.workflow_id AND s.step = c.step
WHERE c.run_id = %(run_id)s::TEXT

-- name: spark_callback_complete
-- Every chunk of the run is merged: from now on the ack that leaves no task of the run releases the
-- callback. Writing the row (even when it is complete already) takes its lock on PostgreSQL, which
-- orders this transaction with the acks that lock it (spark_callback_lock).
UPDATE shardq_spark_callbacks SET complete = true
WHERE run_id = %(run_id)s::TEXT
RETURNING run_mark

-- name: spark_callback_due
-- Of these runs (marks), the callbacks to release now (their workflows): the run is fully enqueued,
-- the callback still waits, and no task of the run is left (one probe of the partial index
-- shardq_tasks_by_workflow per run; PostgreSQL's own, sql/postgresql, probes shardq_tasks_by_run).
-- A dead task cancelled the callback before, so "none left" means every one was acked. The correlated NOT EXISTS is supported on CockroachDB
-- (pkg/sql/logictest/testdata/logic_test/subquery_correlated, "# Customers with no orders.":
-- SELECT * FROM c WHERE NOT EXISTS(SELECT * FROM o WHERE o.c_id=c.c_id)); it reads and locks nothing: under SERIALIZABLE two last acks that each read the other's task cannot
-- both commit (one retries on 40001, then sees none left).
SELECT c.workflow_id
FROM shardq_spark_callbacks AS c
JOIN shardq_workflow_steps AS s ON s.workflow_id = c.workflow_id AND s.step = c.step
WHERE c.run_mark = ANY(%(marks)s::UUID[]) AND c.complete AND s.state = 'waiting'
  AND NOT EXISTS (SELECT 1 FROM shardq_tasks AS t WHERE t.workflow_id = c.run_mark)

-- name: spark_callback_release
-- Release the callbacks spark_callback_due found (their one step each), in the same transaction:
-- 'ready' once, as workflow_children_advance releases a step (only a step still 'waiting' moves, so
-- of two transactions that both found it due exactly one releases it). Its task follows through
-- workflow_tasks_release.
UPDATE shardq_workflow_steps
SET state = 'ready', waiting_on = 0
WHERE workflow_id = ANY(%(workflow_ids)s::UUID[]) AND state = 'waiting'
RETURNING task_id
