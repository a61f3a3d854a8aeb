-- PostgreSQL: the bucket is an ordinary column leading the key (bucket, queue, exec_time, id);
-- the state is a plain column so that claiming a task is a HOT update of its row (no index
-- touched). Hot-path statements address rows by the whole key plus the lease token.

-- name: task_claim_batch
-- Lease up to limit due, ready tasks of one queue in one bucket, earliest exec_time first.
-- SKIP LOCKED lives in a MATERIALIZED CTE so the planner cannot turn it into a nested loop that
-- locks more rows than the limit; the UPDATE re-checks state = 'ready'. The same statement records
-- the batch in shardq_leases (one row per claim, not per task) so the reaper can find expired
-- leases without an index on the state column.
WITH picked AS MATERIALIZED (
    SELECT bucket, queue, exec_time, id
    FROM shardq_tasks
    WHERE bucket = %(bucket)s AND queue = %(queue)s AND exec_time <= now() AND state = 'ready'
    ORDER BY exec_time
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE shardq_tasks AS t
    SET state = 'leased',
        attempts = t.attempts + 1,
        lease_expires_at = now() + %(lease_seconds)s::FLOAT8 * INTERVAL '1 second',
        lease_token = %(token)s::UUID
    FROM picked AS p
    WHERE t.bucket = p.bucket AND t.queue = p.queue AND t.exec_time = p.exec_time AND t.id = p.id
      AND t.state = 'ready'
    RETURNING t.bucket, t.queue, t.exec_time, t.id, t.attempts, t.max_attempts, t.payload,
              t.lease_expires_at, t.created_at
), lease AS (
    INSERT INTO shardq_leases (token, bucket, queue, expires_at, exec_times, ids)
    SELECT %(token)s::UUID, %(bucket)s, %(queue)s, max(lease_expires_at), array_agg(exec_time), array_agg(id)
    FROM claimed
    HAVING count(*) > 0
)
SELECT bucket, queue, exec_time, id, attempts, max_attempts, payload, lease_expires_at, created_at
FROM claimed

-- name: task_ack_many
-- Delete finished tasks by whole key and lease token (a stale token deletes nothing), and drop the
-- lease records of claims whose every task is now settled.
WITH done AS (
    DELETE FROM shardq_tasks AS t
    USING unnest(%(buckets)s::INT4[], %(queues)s::TEXT[], %(exec_times)s::TIMESTAMPTZ[], %(ids)s::UUID[],
                 %(tokens)s::UUID[]) AS k(bucket, queue, exec_time, id, token)
    WHERE t.bucket = k.bucket AND t.queue = k.queue AND t.exec_time = k.exec_time AND t.id = k.id
      AND t.lease_token = k.token AND t.state = 'leased'
    RETURNING t.id
), closed AS (
    DELETE FROM shardq_leases WHERE token = ANY(%(closed_tokens)s::UUID[])
)
SELECT id FROM done

-- name: task_retry_many
-- Put leased tasks back to ready at now() + delay, keeping the error text, fenced by token. With
-- require_expired (the reaper) a task whose lease was extended meanwhile is left alone.
UPDATE shardq_tasks AS t
SET state = 'ready',
    exec_time = now() + k.delay * INTERVAL '1 second',
    lease_token = NULL,
    lease_expires_at = NULL,
    last_error = k.error
FROM unnest(%(buckets)s::INT4[], %(queues)s::TEXT[], %(exec_times)s::TIMESTAMPTZ[], %(ids)s::UUID[],
            %(tokens)s::UUID[], %(delays)s::FLOAT8[], %(errors)s::TEXT[])
     AS k(bucket, queue, exec_time, id, token, delay, error)
WHERE t.bucket = k.bucket AND t.queue = k.queue AND t.exec_time = k.exec_time AND t.id = k.id
  AND t.lease_token = k.token AND t.state = 'leased'
  AND (NOT %(require_expired)s::BOOL OR t.lease_expires_at <= now())
RETURNING t.id

-- name: task_bury_many
-- Move leased tasks to shardq_dead with their last error, fenced by token (and by expiry for the
-- reaper), in one statement so a task is never in both tables or in neither.
WITH gone AS (
    DELETE FROM shardq_tasks AS t
    USING unnest(%(buckets)s::INT4[], %(queues)s::TEXT[], %(exec_times)s::TIMESTAMPTZ[], %(ids)s::UUID[],
                 %(tokens)s::UUID[], %(errors)s::TEXT[]) AS k(bucket, queue, exec_time, id, token, error)
    WHERE t.bucket = k.bucket AND t.queue = k.queue AND t.exec_time = k.exec_time AND t.id = k.id
      AND t.lease_token = k.token AND t.state = 'leased'
      AND (NOT %(require_expired)s::BOOL OR t.lease_expires_at <= now())
    RETURNING t.id, t.queue, t.payload, t.attempts, t.max_attempts, t.dedupe_key, t.created_at, k.error
)
INSERT INTO shardq_dead (id, queue, payload, attempts, max_attempts, dedupe_key, created_at, last_error)
SELECT id, queue, payload, attempts, max_attempts, dedupe_key, created_at, error FROM gone
ON CONFLICT (id) DO UPDATE SET payload = excluded.payload, attempts = excluded.attempts,
    last_error = excluded.last_error, died_at = excluded.died_at
RETURNING id

-- name: task_release_many
-- Hand leased tasks back untouched (graceful shutdown): ready again at their old place, and the
-- attempt they were charged at claim time is given back.
UPDATE shardq_tasks AS t
SET state = 'ready', attempts = t.attempts - 1, lease_token = NULL, lease_expires_at = NULL
FROM unnest(%(buckets)s::INT4[], %(queues)s::TEXT[], %(exec_times)s::TIMESTAMPTZ[], %(ids)s::UUID[],
            %(tokens)s::UUID[]) AS k(bucket, queue, exec_time, id, token)
WHERE t.bucket = k.bucket AND t.queue = k.queue AND t.exec_time = k.exec_time AND t.id = k.id
  AND t.lease_token = k.token AND t.state = 'leased'
RETURNING t.id

-- name: task_extend_many
-- Renew leases to now() + seconds, fenced by token; tasks missing from the result have lost theirs.
UPDATE shardq_tasks AS t
SET lease_expires_at = now() + %(lease_seconds)s::FLOAT8 * INTERVAL '1 second'
FROM unnest(%(buckets)s::INT4[], %(queues)s::TEXT[], %(exec_times)s::TIMESTAMPTZ[], %(ids)s::UUID[],
            %(tokens)s::UUID[]) AS k(bucket, queue, exec_time, id, token)
WHERE t.bucket = k.bucket AND t.queue = k.queue AND t.exec_time = k.exec_time AND t.id = k.id
  AND t.lease_token = k.token AND t.state = 'leased'
RETURNING t.id, t.lease_expires_at

-- name: task_reap_candidates
-- Tasks of one bucket whose lease has expired, found through the bucket's expired lease records
-- (bounded: the reaper's cost follows expired leases, not table size).
SELECT t.bucket, t.queue, t.exec_time, t.id, t.attempts, t.max_attempts, t.lease_token
FROM shardq_leases AS l
CROSS JOIN LATERAL unnest(l.exec_times, l.ids) AS k(exec_time, id)
JOIN shardq_tasks AS t
  ON t.bucket = l.bucket AND t.queue = l.queue AND t.exec_time = k.exec_time AND t.id = k.id
WHERE l.bucket = %(bucket)s AND l.expires_at <= now()
  AND t.lease_token = l.token AND t.state = 'leased' AND t.lease_expires_at <= now()
LIMIT %(limit)s

-- name: lease_sweep
-- Settle expired lease records of one bucket: drop those with no task still leased under their
-- token, push the others to the latest expiry among their tasks (leases extended since).
WITH due AS (
    SELECT l.token,
           (SELECT max(t.lease_expires_at)
              FROM unnest(l.exec_times, l.ids) AS k(exec_time, id)
              JOIN shardq_tasks AS t
                ON t.bucket = l.bucket AND t.queue = l.queue AND t.exec_time = k.exec_time AND t.id = k.id
             WHERE t.lease_token = l.token AND t.state = 'leased') AS still_until
    FROM shardq_leases AS l
    WHERE l.bucket = %(bucket)s AND l.expires_at <= now()
    ORDER BY l.expires_at
    LIMIT %(limit)s
    FOR UPDATE OF l SKIP LOCKED
), dropped AS (
    DELETE FROM shardq_leases AS l USING due
    WHERE l.token = due.token AND due.still_until IS NULL
    RETURNING l.token
), pushed AS (
    UPDATE shardq_leases AS l SET expires_at = due.still_until FROM due
    WHERE l.token = due.token AND due.still_until IS NOT NULL
    RETURNING l.token
)
SELECT (SELECT count(*) FROM dropped) AS dropped, (SELECT count(*) FROM pushed) AS pushed

-- name: task_count_by_bucket
-- Rows per bucket, for `shardq buckets show`.
SELECT bucket, count(*) AS tasks FROM shardq_tasks GROUP BY bucket ORDER BY bucket

-- name: layout_get
-- The bucket count consumers must honour, and the count a resize is moving away from.
SELECT bucket_count, resizing_from FROM shardq_buckets
