-- CockroachDB: the key is (state, queue, rank, exec_time, id) USING HASH; the database derives the
-- hidden shard column from all five. A claim scans `{shard_col} = bucket AND state = 'ready' AND
-- queue = q`, ordered by (rank, exec_time): one span holding only claimable rows, so LIMIT ... SKIP
-- LOCKED is a hard limit (a residual filter would make SKIP LOCKED lock far more rows than it
-- returns, starving other consumers: cockroachdb#121917). Tasks scheduled for later are in the
-- 'scheduled' span, not this one. Moving a task between states rewrites its key.
--
-- Point lookups. The optimizer derives a computed key column (the shard) for a lookup join only
-- when *every* column of its expression has a join equality with an input column
-- (pkg/sql/opt/lookupjoin/constraint_builder.go, findComputedColJoinEquality: "columns referenced
-- in the computed expression are a subset of columns that already have equality constraints"); a
-- column equal to a constant does not count, and the lookup then fans out over every bucket
-- (docs/cockroachdb.md, "Hot statements"). So: claim and promote name the bucket their subquery found the row in
-- (`t.{shard_col} = %(bucket)s`), and the key-addressed statements take the state as an input
-- column (`unnest(%(states)s …) AS k(state, …)`, always 'leased'), so all five shard inputs are
-- join equalities and each row is one point lookup.
--
-- Every statement runs alone in autocommit, so the server can retry 40001 itself while results
-- stay under its results buffer; shardq.sessions.session retries the rest. No statement modifies shardq_tasks
-- twice (CockroachDB refuses that): multi-step changes run as transactions through shardq.sessions.session.

-- name: task_claim_batch
-- Lease up to limit ready tasks of one queue in one bucket, lowest rank (priority) then earliest
-- exec_time first; the UPDATE re-checks state = 'ready' because CockroachDB's SKIP LOCKED locks are
-- best-effort.
UPDATE shardq_tasks AS t
SET state = 'leased',
    attempts = t.attempts + 1,
    lease_expires_at = now() + %(lease_seconds)s::FLOAT8 * INTERVAL '1 second',
    lease_token = %(token)s::UUID
FROM (
    SELECT state, queue, rank, exec_time, id
    FROM shardq_tasks
    WHERE {shard_col} = %(bucket)s AND state = 'ready' AND queue = %(queue)s
    ORDER BY rank, exec_time
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
) AS p
WHERE t.{shard_col} = %(bucket)s AND t.state = 'ready' AND t.queue = p.queue AND t.rank = p.rank
  AND t.exec_time = p.exec_time AND t.id = p.id
RETURNING %(bucket)s::INT8 AS bucket, t.queue, t.rank, t.exec_time, t.id, t.attempts, t.max_attempts, t.payload,
          t.lease_expires_at, t.created_at, t.priority, t.exclusive_key, t.workflow_id

-- name: task_promote_due
-- Make due scheduled tasks of one queue in one bucket ready (rank = their priority); the span
-- (shard, 'scheduled', queue, rank = scheduled_rank, exec_time <= now()) is contiguous.
UPDATE shardq_tasks AS t
SET state = 'ready', rank = t.priority
FROM (
    SELECT state, queue, rank, exec_time, id
    FROM shardq_tasks
    WHERE {shard_col} = %(bucket)s AND state = 'scheduled' AND queue = %(queue)s
      AND rank = %(scheduled_rank)s AND exec_time <= now()
    ORDER BY exec_time
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
) AS d
WHERE t.{shard_col} = %(bucket)s AND t.state = 'scheduled' AND t.queue = d.queue AND t.rank = d.rank
  AND t.exec_time = d.exec_time AND t.id = d.id
RETURNING t.id

-- name: task_ack_many
-- Delete finished tasks by whole key and lease token; a stale token deletes nothing.
DELETE FROM shardq_tasks AS t
USING unnest(%(states)s::STRING[], %(queues)s::STRING[], %(ranks)s::INT8[], %(exec_times)s::TIMESTAMPTZ[], %(ids)s::UUID[],
             %(tokens)s::UUID[]) AS k(state, queue, rank, exec_time, id, token)
WHERE t.state = k.state AND t.queue = k.queue AND t.rank = k.rank AND t.exec_time = k.exec_time
  AND t.id = k.id AND t.lease_token = k.token
RETURNING t.id

-- name: task_retry_many
-- Put leased tasks back at now() + delay (scheduled, or ready at once for a zero delay) with the
-- error text, fenced by token (and by expiry when the reaper asks).
-- A refund (0 or 1 per task) gives back the attempt the claim charged: a handler that asked for
-- its retry (shardq.Retry) has not used one.
UPDATE shardq_tasks AS t
SET state = CASE WHEN k.delay > 0 THEN 'scheduled' ELSE 'ready' END,
    rank = CASE WHEN k.delay > 0 THEN %(scheduled_rank)s ELSE t.priority END,
    exec_time = now() + k.delay * INTERVAL '1 second',
    lease_token = NULL,
    lease_expires_at = NULL,
    attempts = t.attempts - k.refund,
    last_error = k.error
FROM unnest(%(states)s::STRING[], %(queues)s::STRING[], %(ranks)s::INT8[], %(exec_times)s::TIMESTAMPTZ[], %(ids)s::UUID[],
            %(tokens)s::UUID[], %(delays)s::FLOAT8[], %(refunds)s::INT4[], %(errors)s::STRING[])
     AS k(state, queue, rank, exec_time, id, token, delay, refund, error)
WHERE t.state = k.state AND t.queue = k.queue AND t.rank = k.rank AND t.exec_time = k.exec_time
  AND t.id = k.id AND t.lease_token = k.token
  AND (NOT %(require_expired)s::BOOL OR t.lease_expires_at <= now())
RETURNING t.id

-- name: task_bury_many
-- Move leased tasks to shardq_dead with their last error, fenced by token (and expiry for the reaper).
WITH gone AS (
    DELETE FROM shardq_tasks AS t
    USING unnest(%(states)s::STRING[], %(queues)s::STRING[], %(ranks)s::INT8[], %(exec_times)s::TIMESTAMPTZ[], %(ids)s::UUID[],
                 %(tokens)s::UUID[], %(errors)s::STRING[]) AS k(state, queue, rank, exec_time, id, token, error)
    WHERE t.state = k.state AND t.queue = k.queue AND t.rank = k.rank AND t.exec_time = k.exec_time
      AND t.id = k.id AND t.lease_token = k.token
      AND (NOT %(require_expired)s::BOOL OR t.lease_expires_at <= now())
    RETURNING t.id, t.queue, t.payload, t.attempts, t.max_attempts, t.dedupe_key, t.created_at, t.priority,
              t.exclusive_key, k.error
)
INSERT INTO shardq_dead (id, queue, payload, attempts, max_attempts, dedupe_key, created_at, priority,
                         exclusive_key, last_error)
SELECT id, queue, payload, attempts, max_attempts, dedupe_key, created_at, priority, exclusive_key, error FROM gone
ON CONFLICT (id) DO UPDATE SET payload = excluded.payload, attempts = excluded.attempts,
    last_error = excluded.last_error, died_at = excluded.died_at
RETURNING id

-- name: task_release_many
-- Hand leased tasks back untouched (graceful shutdown), giving back the attempt charged at claim.
UPDATE shardq_tasks AS t
SET state = 'ready', attempts = t.attempts - 1, lease_token = NULL, lease_expires_at = NULL
FROM unnest(%(states)s::STRING[], %(queues)s::STRING[], %(ranks)s::INT8[], %(exec_times)s::TIMESTAMPTZ[], %(ids)s::UUID[],
            %(tokens)s::UUID[]) AS k(state, queue, rank, exec_time, id, token)
WHERE t.state = k.state AND t.queue = k.queue AND t.rank = k.rank AND t.exec_time = k.exec_time
  AND t.id = k.id AND t.lease_token = k.token
RETURNING t.id

-- name: task_extend_many
-- Renew leases to now() + seconds, fenced by token; tasks missing from the result have lost theirs.
UPDATE shardq_tasks AS t
SET lease_expires_at = now() + %(lease_seconds)s::FLOAT8 * INTERVAL '1 second'
FROM unnest(%(states)s::STRING[], %(queues)s::STRING[], %(ranks)s::INT8[], %(exec_times)s::TIMESTAMPTZ[], %(ids)s::UUID[],
            %(tokens)s::UUID[]) AS k(state, queue, rank, exec_time, id, token)
WHERE t.state = k.state AND t.queue = k.queue AND t.rank = k.rank AND t.exec_time = k.exec_time
  AND t.id = k.id AND t.lease_token = k.token
RETURNING t.id, t.lease_expires_at

-- name: task_reap_candidates
-- Expired leases in one bucket. The span `{shard_col} = b AND state = 'leased'` holds only leased
-- rows, which are few (bounded by what is in flight); no locks are taken: the follow-up retry or
-- bury statement is fenced by token and expiry, so racing reapers and consumers are harmless.
SELECT %(bucket)s::INT8 AS bucket, queue, rank, exec_time, id, attempts, max_attempts, lease_token, exclusive_key,
       workflow_id
FROM shardq_tasks
WHERE {shard_col} = %(bucket)s AND state = 'leased' AND lease_expires_at <= now()
LIMIT %(limit)s

-- name: task_count_by_bucket
-- Rows per bucket from a historical read, which never waits on claimers' intents.
SELECT {shard_col} AS bucket, count(*) AS tasks
FROM shardq_tasks AS OF SYSTEM TIME follower_read_timestamp()
GROUP BY 1 ORDER BY 1

-- name: exclusive_keys_lock
-- CockroachDB needs no lock here: its transactions are serializable, so a backlog insert racing
-- the release of its key makes one of the two transactions fail with 40001 and be retried by
-- shardq.sessions.session. Kept as a statement so both databases run the same steps.
SELECT 0 AS locked

-- name: task_backlog_release
-- For each (queue, exclusive key) whose active task just left, promote the first backlog entry
-- (lowest priority, earliest exec_time) to ready, or to scheduled if its time has not come.
WITH heads AS (
    SELECT DISTINCT ON (t.queue, t.exclusive_key) t.state, t.queue, t.rank, t.exec_time, t.id
    FROM shardq_tasks AS t
    JOIN unnest(%(queues)s::STRING[], %(keys)s::STRING[]) AS k(queue, key)
      ON t.queue = k.queue AND t.exclusive_key = k.key
    WHERE t.backlogged
    ORDER BY t.queue, t.exclusive_key, t.priority, t.exec_time, t.id
)
UPDATE shardq_tasks AS t
SET backlogged = false,
    state = CASE WHEN t.exec_time > now() THEN 'scheduled' ELSE 'ready' END,
    rank = CASE WHEN t.exec_time > now() THEN %(scheduled_rank)s ELSE t.priority END
FROM heads AS h
WHERE t.state = h.state AND t.queue = h.queue AND t.rank = h.rank AND t.exec_time = h.exec_time AND t.id = h.id
RETURNING t.id

-- name: task_count_by_bucket_current
-- Rows per bucket from a current read: the fallback when the layout is younger than the historical
-- read's timestamp (right after a resize, the new shard column did not exist ~5 s ago).
SELECT {shard_col} AS bucket, count(*) AS tasks
FROM shardq_tasks
GROUP BY 1 ORDER BY 1
