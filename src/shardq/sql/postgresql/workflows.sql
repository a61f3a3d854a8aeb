-- name: workflow_tasks_release
-- PostgreSQL's workflow_tasks_release (sql/common/workflows.sql: keep them in step) that also
-- wakes the listening workers of each queue it released steps into (wake true): one pg_notify
-- per queue, delivered when the ack that released them commits, like the producer's wake-up
-- after an enqueue (shardq.notify). Without it an idle listening worker took a released step
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

-- name: workflow_tasks_take
-- The acking worker takes the tasks of the sole children its ack just released (a chain's next
-- steps), in the ack's transaction: each waiting task of one of the offered queues (not limited,
-- served by that worker: shardq.worker.taking), without an exclusive key and due, is leased where
-- it lies, as a claim leases it (attempts + 1, the queue's lease, a token), so that it is never
-- claimed. Its key stays at the backlog rank: no indexed column changes, so the update is HOT
-- (the row's page has room: fillfactor, migration 0004) and writes no index entry, where a
-- release moves the row into the claim's span and writes one in every index. Every statement that
-- makes a leased task ready again sets rank to its priority (task_retry_many, task_release_many),
-- so a taken task whose lease expires, or that its worker hands back, goes where every claim
-- finds it. One lease record per bucket and queue, as per claim (task_claim_batch), its token
-- derived from %(token)s and them (md5 of the text: 32 hex digits, which PostgreSQL reads as a
-- UUID). A task left out (another queue, a limit, a key, not due, no longer waiting) is released
-- by workflow_tasks_release after it.
WITH taken AS (
    UPDATE shardq_tasks AS t
    SET state = 'leased',
        attempts = t.attempts + 1,
        lease_expires_at = now() + q.seconds * INTERVAL '1 second',
        lease_token = md5(%(token)s::TEXT || ' ' || t.bucket::TEXT || ' ' || t.queue)::UUID
    FROM unnest(%(queues)s::TEXT[], %(lease_seconds)s::FLOAT8[]) AS q(queue, seconds)
    WHERE t.id = ANY(%(ids)s::UUID[]) AND t.state = 'waiting' AND t.queue = q.queue
      AND t.exclusive_key IS NULL AND t.exec_time <= now()
    RETURNING t.bucket, t.queue, t.rank, t.exec_time, t.id, t.attempts, t.max_attempts, t.payload,
              t.lease_expires_at, t.created_at, t.priority, t.workflow_id, t.lease_token
), lease AS (
    INSERT INTO shardq_leases (token, bucket, queue, expires_at, ranks, exec_times, ids)
    SELECT lease_token, bucket, queue, max(lease_expires_at), array_agg(rank), array_agg(exec_time), array_agg(id)
    FROM taken
    GROUP BY lease_token, bucket, queue
)
SELECT bucket, queue, rank, exec_time, id, attempts, max_attempts, payload, lease_expires_at, created_at,
       priority, workflow_id, lease_token
FROM taken
ORDER BY lease_token, rank, exec_time, id
