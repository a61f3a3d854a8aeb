-- name: workflow_tasks_release
-- PostgreSQL's workflow_tasks_release (sql/common/workflows.sql: keep them in step) that also
-- wakes the listening workers of each queue it released steps into (wake true): one pg_notify
-- per queue, delivered when the ack that released them commits, like the producer's wake-up
-- after an enqueue (shardq.lifecycle.notify). Without it an idle listening worker took a released step
-- only at its next poll (up to its idle pause, 1 s by default: docs/workflows.md).
WITH released AS (
    UPDATE shardq_tasks
    SET state = 'ready', rank = priority
    WHERE id = ANY(%(ids)s::UUID[]) AND state = 'waiting'
    RETURNING id, queue
), woken AS (
    SELECT count(pg_notify('shardq_wake', q.queue)) AS sent
    FROM (SELECT DISTINCT r.queue FROM released AS r) AS q
    WHERE %(wake)s::BOOL
)
SELECT r.id FROM released AS r CROSS JOIN woken AS w

-- name: workflow_steps_acked_take
-- workflow_steps_acked (sql/common/workflows.sql: keep them in step) for an acking worker that
-- takes the tasks of the sole children its ack releases (a chain's next steps), in one statement:
-- up to %(room)s of them, in order of their ids, each waiting task of one of the offered queues
-- (not limited, served by that worker: shardq.worker.handoff), without an exclusive key and due, is
-- leased where it lies, as a claim leases it (attempts + 1, the queue's lease, a token), so that it
-- is never claimed. Its key stays at the backlog rank: no indexed column changes, so the update is
-- HOT (the row's page has room: fillfactor, migration 0004) and writes no index entry, where a
-- release moves the row into the claim's span and writes one in every index. Every statement that
-- makes a leased task ready again sets rank to its priority (task_retry_many, task_release_many),
-- so a taken task whose lease expires, or that its worker hands back, goes where every claim
-- finds it. One lease record per bucket and queue, as per claim (task_claim_batch), its token
-- derived from %(token)s and them (md5 of the text: 32 hex digits, which PostgreSQL reads as a
-- UUID). The ids go to the update as one sorted array (= ANY: the index scan visits them in
-- order, so two acks lock children in one order).
-- Rows of two shapes, the first seven columns or the rest NULL: the acked steps but those whose sole
-- child it took (the caller releases, finishes or counts off those as after workflow_steps_acked),
-- then the tasks taken, as the claim returns them, each token's in key order; with %(parents)s a
-- taken task's row also names its parent's task id (for results kept in step rows). A step whose
-- child was taken returns no row: its ack has nothing more to do, and the worker loads nothing.
WITH acked AS MATERIALIZED (
    SELECT workflow_id, step, child_kinds, only_child, task_id, sole_child_task_id, only_shard
    FROM shardq_workflow_steps
    WHERE task_id = ANY(%(task_ids)s::UUID[]) AND state IN ('waiting', 'ready')
), taken AS (
    UPDATE shardq_tasks AS t
    SET state = 'leased',
        attempts = t.attempts + 1,
        lease_expires_at = now() + q.seconds * INTERVAL '1 second',
        lease_token = md5(%(token)s::TEXT || ' ' || t.bucket::TEXT || ' ' || t.queue)::UUID
    FROM unnest(%(queues)s::TEXT[], %(lease_seconds)s::FLOAT8[]) AS q(queue, seconds)
    WHERE t.id = ANY(ARRAY(
            SELECT a.sole_child_task_id FROM acked AS a
            WHERE a.sole_child_task_id IS NOT NULL
            ORDER BY a.sole_child_task_id
            LIMIT %(room)s::INT8))
      AND t.state = 'waiting' AND t.queue = q.queue AND t.exclusive_key IS NULL AND t.exec_time <= now()
    RETURNING t.bucket, t.queue, t.rank, t.exec_time, t.id, t.attempts, t.max_attempts, t.payload,
              t.lease_expires_at, t.created_at, t.priority, t.workflow_id, t.lease_token
), lease AS (
    INSERT INTO shardq_leases (token, bucket, queue, expires_at, ranks, exec_times, ids)
    SELECT lease_token, bucket, queue, max(lease_expires_at), array_agg(rank), array_agg(exec_time), array_agg(id)
    FROM taken
    GROUP BY lease_token, bucket, queue
)
SELECT a.workflow_id, a.step, a.child_kinds, a.only_child, a.task_id, a.sole_child_task_id, a.only_shard,
       NULL::INT4 AS bucket, NULL::TEXT AS queue, NULL::INT8 AS rank, NULL::TIMESTAMPTZ AS exec_time,
       NULL::UUID AS id, NULL::INT4 AS attempts, NULL::INT4 AS max_attempts, NULL::BYTEA AS payload,
       NULL::TIMESTAMPTZ AS lease_expires_at, NULL::TIMESTAMPTZ AS created_at, NULL::INT8 AS priority,
       NULL::UUID AS task_workflow_id, NULL::UUID AS lease_token, NULL::UUID AS parent_task_id
FROM acked AS a
WHERE a.sole_child_task_id IS NULL OR NOT EXISTS (SELECT 1 FROM taken AS k WHERE k.id = a.sole_child_task_id)
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL,
       k.bucket, k.queue, k.rank, k.exec_time, k.id, k.attempts, k.max_attempts, k.payload,
       k.lease_expires_at, k.created_at, k.priority, k.workflow_id, k.lease_token, p.task_id
FROM taken AS k
LEFT JOIN acked AS p ON %(parents)s::BOOL AND p.sole_child_task_id = k.id
ORDER BY lease_token NULLS FIRST, rank, exec_time, id
