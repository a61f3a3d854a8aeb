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
