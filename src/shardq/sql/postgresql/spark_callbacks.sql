-- name: spark_callback_lock
-- PostgreSQL (READ COMMITTED): before an ack of a run's tasks asks whether any task of the run is
-- left (spark_callback_due), it locks the run's callback row. Without it two last acks committing at
-- once would each still see the other's task (its delete not committed yet) and neither would
-- release the callback. With it the second waits here, and its next statement takes a snapshot in
-- which the first one's delete has committed. The lock is held to the ack's commit: a run's acks
-- take turns on it (the tasks of runs without then= never come here). Returns the runs' callback
-- workflows (a dead task cancels them).
SELECT workflow_id FROM shardq_spark_callbacks
WHERE run_mark = ANY(%(marks)s::UUID[])
ORDER BY run_mark
FOR UPDATE

-- name: spark_callback_due
-- PostgreSQL's spark_callback_due (sql/common/spark_callbacks.sql: keep them in step), whose probe
-- of the run's tasks names the predicate of the partial index shardq_tasks_by_run (migration 0019:
-- only a run's tasks, whose mark is a UUID version 5, are indexed, not workflow steps) word for
-- word: PostgreSQL uses a partial index only where the query's conditions prove its predicate, and
-- the equality with a run's mark alone does not.
SELECT c.workflow_id
FROM shardq_spark_callbacks AS c
JOIN shardq_workflow_steps AS s ON s.workflow_id = c.workflow_id AND s.step = c.step
WHERE c.run_mark = ANY(%(marks)s::UUID[]) AND c.complete AND s.state = 'waiting'
  AND NOT EXISTS (SELECT 1 FROM shardq_tasks AS t
                  WHERE t.workflow_id = c.run_mark AND substr(t.workflow_id::text, 15, 1) = '5')
