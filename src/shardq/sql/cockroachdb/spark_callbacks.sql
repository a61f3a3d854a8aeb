-- name: spark_callback_lock
-- CockroachDB: no lock. Transactions are SERIALIZABLE (the engine pins it), so of two last acks that
-- each read the other's task in spark_callback_due one fails with 40001 and runs again, and sees none
-- left. A FOR UPDATE here would make the callback row one hot key that every ack of the run locks,
-- which is what this design avoids. A plain read of the row instead: the runs' callback workflows
-- (a dead task cancels them).
SELECT workflow_id FROM shardq_spark_callbacks
WHERE run_mark = ANY(%(marks)s::UUID[])
