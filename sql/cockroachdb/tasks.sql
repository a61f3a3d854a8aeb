-- CockroachDB: the key is (state, queue, exec_time, id) USING HASH; the database derives the hidden
-- shard column from all four. A claim scans `{shard_col} = bucket AND state = 'ready' AND queue = q
-- AND exec_time <= now()`: one span holding only claimable rows, so LIMIT ... SKIP LOCKED is a hard
-- limit (a residual filter would make SKIP LOCKED lock far more rows than it returns, starving other
-- consumers: cockroachdb#121917). Moving a task between states rewrites its key; addressing it by
-- (state, queue, exec_time, id) lets the optimizer compute the shard, so no statement scans by id.
-- Every statement runs alone in autocommit, so the server can retry 40001 itself while results stay
-- under its results buffer; shardq.db retries the rest.

-- name: task_claim_batch
-- Lease up to limit due, ready tasks of one queue in one bucket, earliest exec_time first; the
-- UPDATE re-checks state = 'ready' because CockroachDB's SKIP LOCKED locks are best-effort.
UPDATE shardq_tasks AS t
SET state = 'leased',
    attempts = t.attempts + 1,
    lease_expires_at = now() + %(lease_seconds)s::FLOAT8 * INTERVAL '1 second',
    lease_token = %(token)s::UUID
FROM (
    SELECT state, queue, exec_time, id
    FROM shardq_tasks
    WHERE {shard_col} = %(bucket)s AND state = 'ready' AND queue = %(queue)s AND exec_time <= now()
    ORDER BY exec_time
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
) AS p
WHERE t.state = 'ready' AND t.queue = p.queue AND t.exec_time = p.exec_time AND t.id = p.id
RETURNING %(bucket)s::INT8 AS bucket, t.queue, t.exec_time, t.id, t.attempts, t.max_attempts, t.payload,
          t.lease_expires_at, t.created_at

-- name: task_ack_many
-- Delete finished tasks by whole key and lease token; a stale token deletes nothing.
DELETE FROM shardq_tasks AS t
USING unnest(%(queues)s::STRING[], %(exec_times)s::TIMESTAMPTZ[], %(ids)s::UUID[], %(tokens)s::UUID[])
      AS k(queue, exec_time, id, token)
WHERE t.state = 'leased' AND t.queue = k.queue AND t.exec_time = k.exec_time AND t.id = k.id
  AND t.lease_token = k.token
RETURNING t.id

-- name: task_retry_many
-- Put leased tasks back to ready at now() + delay with the error text, fenced by token (and by
-- expiry when the reaper asks). The row moves to the 'ready' span, and usually to another bucket.
UPDATE shardq_tasks AS t
SET state = 'ready',
    exec_time = now() + k.delay * INTERVAL '1 second',
    lease_token = NULL,
    lease_expires_at = NULL,
    last_error = k.error
FROM unnest(%(queues)s::STRING[], %(exec_times)s::TIMESTAMPTZ[], %(ids)s::UUID[], %(tokens)s::UUID[],
            %(delays)s::FLOAT8[], %(errors)s::STRING[]) AS k(queue, exec_time, id, token, delay, error)
WHERE t.state = 'leased' AND t.queue = k.queue AND t.exec_time = k.exec_time AND t.id = k.id
  AND t.lease_token = k.token
  AND (NOT %(require_expired)s::BOOL OR t.lease_expires_at <= now())
RETURNING t.id

-- name: task_bury_many
-- Move leased tasks to shardq_dead with their last error, fenced by token (and expiry for the reaper).
WITH gone AS (
    DELETE FROM shardq_tasks AS t
    USING unnest(%(queues)s::STRING[], %(exec_times)s::TIMESTAMPTZ[], %(ids)s::UUID[], %(tokens)s::UUID[],
                 %(errors)s::STRING[]) AS k(queue, exec_time, id, token, error)
    WHERE t.state = 'leased' AND t.queue = k.queue AND t.exec_time = k.exec_time AND t.id = k.id
      AND t.lease_token = k.token
      AND (NOT %(require_expired)s::BOOL OR t.lease_expires_at <= now())
    RETURNING t.id, t.queue, t.payload, t.attempts, t.max_attempts, t.dedupe_key, t.created_at, k.error
)
INSERT INTO shardq_dead (id, queue, payload, attempts, max_attempts, dedupe_key, created_at, last_error)
SELECT id, queue, payload, attempts, max_attempts, dedupe_key, created_at, error FROM gone
ON CONFLICT (id) DO UPDATE SET payload = excluded.payload, attempts = excluded.attempts,
    last_error = excluded.last_error, died_at = excluded.died_at
RETURNING id

-- name: task_release_many
-- Hand leased tasks back untouched (graceful shutdown), giving back the attempt charged at claim.
UPDATE shardq_tasks AS t
SET state = 'ready', attempts = t.attempts - 1, lease_token = NULL, lease_expires_at = NULL
FROM unnest(%(queues)s::STRING[], %(exec_times)s::TIMESTAMPTZ[], %(ids)s::UUID[], %(tokens)s::UUID[])
     AS k(queue, exec_time, id, token)
WHERE t.state = 'leased' AND t.queue = k.queue AND t.exec_time = k.exec_time AND t.id = k.id
  AND t.lease_token = k.token
RETURNING t.id

-- name: task_extend_many
-- Renew leases to now() + seconds, fenced by token; tasks missing from the result have lost theirs.
UPDATE shardq_tasks AS t
SET lease_expires_at = now() + %(lease_seconds)s::FLOAT8 * INTERVAL '1 second'
FROM unnest(%(queues)s::STRING[], %(exec_times)s::TIMESTAMPTZ[], %(ids)s::UUID[], %(tokens)s::UUID[])
     AS k(queue, exec_time, id, token)
WHERE t.state = 'leased' AND t.queue = k.queue AND t.exec_time = k.exec_time AND t.id = k.id
  AND t.lease_token = k.token
RETURNING t.id, t.lease_expires_at

-- name: task_reap_candidates
-- Expired leases in one bucket. The span `{shard_col} = b AND state = 'leased'` holds only leased
-- rows, which are few (bounded by what is in flight); no locks are taken: the follow-up retry or
-- bury statement is fenced by token and expiry, so racing reapers and consumers are harmless.
SELECT %(bucket)s::INT8 AS bucket, queue, exec_time, id, attempts, max_attempts, lease_token
FROM shardq_tasks
WHERE {shard_col} = %(bucket)s AND state = 'leased' AND lease_expires_at <= now()
LIMIT %(limit)s

-- name: task_count_by_bucket
-- Rows per bucket from a historical read, which never waits on claimers' intents.
SELECT {shard_col} AS bucket, count(*) AS tasks
FROM shardq_tasks AS OF SYSTEM TIME follower_read_timestamp()
GROUP BY 1 ORDER BY 1
