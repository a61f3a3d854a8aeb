-- PostgreSQL: the key is (bucket, queue, rank, exec_time, id); the bucket is an ordinary column
-- leading the key, the state a plain column, so claiming a task is a HOT update of its row (no
-- index touched). Hot-path statements address rows by the whole key plus the lease token.
-- rank: a ready task's priority; %(scheduled_rank)s / %(backlog_rank)s for tasks waiting for their
-- time or their exclusive key (see migration 0001).

-- name: task_claim_batch
-- Lease up to limit ready tasks of one queue in one bucket, lowest rank (priority) first, then
-- earliest exec_time. The span (bucket, queue, rank < backlog_rank) holds only ready and leased
-- rows, and leased rows are few. SKIP LOCKED lives in a MATERIALIZED CTE so the planner cannot turn
-- it into a nested loop that locks more rows than the limit; the UPDATE then reaches the locked rows
-- by their physical address (ctid, stable while we hold the row lock: a TID scan, whatever the
-- planner thinks of the batch size) and re-checks state = 'ready'.
-- The same statement records the batch in shardq_leases (one row per claim, not per task) so the
-- reaper can find expired leases without an index on the state column.
WITH picked AS MATERIALIZED (
    SELECT ctid
    FROM shardq_tasks
    WHERE bucket = %(bucket)s AND queue = %(queue)s AND rank < %(backlog_rank)s AND state = 'ready'
    ORDER BY rank, exec_time, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE shardq_tasks AS t
    SET state = 'leased',
        attempts = t.attempts + 1,
        lease_expires_at = now() + %(lease_seconds)s::FLOAT8 * INTERVAL '1 second',
        lease_token = %(token)s::UUID
    WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM picked)) AND t.state = 'ready'
    RETURNING t.bucket, t.queue, t.rank, t.exec_time, t.id, t.attempts, t.max_attempts, t.payload,
              t.lease_expires_at, t.created_at, t.priority, t.exclusive_key, t.workflow_id
), lease AS (
    INSERT INTO shardq_leases (token, bucket, queue, expires_at, ranks, exec_times, ids)
    SELECT %(token)s::UUID, %(bucket)s, %(queue)s, max(lease_expires_at), array_agg(rank), array_agg(exec_time),
           array_agg(id)
    FROM claimed
    HAVING count(*) > 0
)
SELECT bucket, queue, rank, exec_time, id, attempts, max_attempts, payload, lease_expires_at, created_at,
       priority, exclusive_key, workflow_id
FROM claimed
ORDER BY rank, exec_time, id

-- name: task_claim_round
-- One claim statement for a whole round over the buckets (PostgreSQL): walk them in the order
-- given and lease up to limit ready tasks of one queue, each bucket's in (rank, exec_time) order,
-- until limit tasks are leased. The nested loop runs each bucket's LIMITed SKIP LOCKED scan (the
-- same span as task_claim_batch) only while the outer LIMIT still wants rows, and LockRows locks a
-- row only when it is pulled, so no more rows are locked than returned. A shallow queue (tasks
-- trickling into every bucket) then costs one statement per round instead of one per bucket.
-- Tasks of each bucket get that bucket's token (tokens[i] for buckets[i]) and one lease record,
-- so settling and reaping stay per bucket.
WITH picked AS MATERIALIZED (
    SELECT p.ctid
    FROM unnest(%(buckets)s::INT4[]) AS w(bucket)
    CROSS JOIN LATERAL (
        SELECT ctid
        FROM shardq_tasks
        WHERE bucket = w.bucket AND queue = %(queue)s AND rank < %(backlog_rank)s AND state = 'ready'
        ORDER BY rank, exec_time, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS p
    LIMIT %(limit)s
), claimed AS (
    UPDATE shardq_tasks AS t
    SET state = 'leased',
        attempts = t.attempts + 1,
        lease_expires_at = now() + %(lease_seconds)s::FLOAT8 * INTERVAL '1 second',
        lease_token = (%(tokens)s::UUID[])[array_position(%(buckets)s::INT4[], t.bucket)]
    WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM picked)) AND t.state = 'ready'
    RETURNING t.bucket, t.queue, t.rank, t.exec_time, t.id, t.attempts, t.max_attempts, t.payload,
              t.lease_expires_at, t.created_at, t.priority, t.exclusive_key, t.workflow_id, t.lease_token
), lease AS (
    INSERT INTO shardq_leases (token, bucket, queue, expires_at, ranks, exec_times, ids)
    SELECT lease_token, bucket, %(queue)s, max(lease_expires_at), array_agg(rank), array_agg(exec_time), array_agg(id)
    FROM claimed
    GROUP BY lease_token, bucket
), commit_mode AS (
    -- Unless asked to be durable, the claim commits without waiting for its WAL flush
    -- (synchronous_commit = off for this statement's transaction only), which was one of the two
    -- flushes every task waited for before its handler started (docs/latency.md). A claim lost in a
    -- server crash leaves its tasks ready, to be claimed and run again: at-least-once, as after a
    -- worker's crash, and the next synchronous commit on the server (any ack) flushes it anyway. A
    -- claim that took a task with an exclusive key keeps the session's setting: that task's lease
    -- is what keeps its key's next task from running beside it.
    SELECT set_config('synchronous_commit',
                      CASE WHEN %(durable)s::BOOL OR bool_or(exclusive_key IS NOT NULL)
                           THEN current_setting('synchronous_commit') ELSE 'off' END,
                      true) AS mode
    FROM claimed
)
-- Only what the caller cannot know, since a result row is decoded per task: not the token (the
-- caller chose each bucket's), the queue (one per statement) or the priority (a ready task's rank
-- is its priority). Column order is ClaimedTask.from_claim_row's. In key order (RETURNING follows
-- none): tasks start by priority, and each bucket's first and last bound its claim's rows.
SELECT bucket, rank, exec_time, id, attempts, max_attempts, payload, lease_expires_at, created_at, exclusive_key,
       workflow_id
FROM claimed CROSS JOIN commit_mode
ORDER BY rank, exec_time, id

-- name: task_promote_due
-- Make due scheduled tasks of one queue in one bucket ready (rank = their priority). The span
-- (bucket, queue, rank = scheduled_rank, exec_time <= now()) is contiguous.
WITH due AS MATERIALIZED (
    SELECT ctid
    FROM shardq_tasks
    WHERE bucket = %(bucket)s AND queue = %(queue)s AND rank = %(scheduled_rank)s AND exec_time <= now()
    ORDER BY exec_time
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE shardq_tasks AS t
SET state = 'ready', rank = t.priority
WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM due)) AND t.state = 'scheduled'
RETURNING t.id

-- name: task_promote_due_round
-- task_promote_due for several buckets in one statement (PostgreSQL): up to limit due scheduled
-- tasks of one queue, bucket by bucket in the order given, become ready.
WITH due AS MATERIALIZED (
    SELECT p.ctid
    FROM unnest(%(buckets)s::INT4[]) AS w(bucket)
    CROSS JOIN LATERAL (
        SELECT ctid
        FROM shardq_tasks
        WHERE bucket = w.bucket AND queue = %(queue)s AND rank = %(scheduled_rank)s AND exec_time <= now()
        ORDER BY exec_time
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS p
    LIMIT %(limit)s
)
UPDATE shardq_tasks AS t
SET state = 'ready', rank = t.priority
WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM due)) AND t.state = 'scheduled'
RETURNING t.id

-- name: task_ack_many
-- Delete finished tasks by whole key and lease token (a stale token deletes nothing), and drop the
-- lease records of claims whose every task is now settled. Returns how many went, and their ids
-- only when fewer than expected, as task_ack_claim does: one row, not a row and an id object per
-- task for the worker to load (an ack of a chain's steps acks hundreds at once).
-- (All statements over leased tasks by key — task_ack_many, task_retry_many, task_bury_many,
-- task_release_many, task_extend_many, task_ack_many_kept — join the state 'leased' as an input
-- column and name the ids in = ANY as well: written `t.state = 'leased'`, the planner takes the
-- selectivity of that constant from the column's statistics, which an ANALYZE run while few tasks
-- were leased puts near zero. It then expected about one leased row, scanned the table for them
-- and compared each with every key of the batch: 60 ms for an ack of 400 tasks in a table of
-- 50,000 where an index probe per key takes 2 ms (docs/loadtest.md, "Plans that depend on the
-- statistics"). The = ANY makes the id index the cheaper path at any table size.)
WITH done AS (
    DELETE FROM shardq_tasks AS t
    USING unnest(%(buckets)s::INT4[], %(queues)s::TEXT[], %(ranks)s::INT8[], %(exec_times)s::TIMESTAMPTZ[],
                 %(ids)s::UUID[], %(tokens)s::UUID[], %(states)s::TEXT[])
     AS k(bucket, queue, rank, exec_time, id, token, state)
    WHERE t.bucket = k.bucket AND t.queue = k.queue AND t.rank = k.rank AND t.exec_time = k.exec_time
      AND t.id = k.id AND t.lease_token = k.token AND t.state = k.state AND t.id = ANY(%(ids)s::UUID[])
    RETURNING t.id
), closed AS (
    DELETE FROM shardq_leases WHERE token = ANY(%(closed_tokens)s::UUID[])
)
SELECT count(*) AS acked, CASE WHEN count(*) < %(expected)s::INT4 THEN coalesce(array_agg(id), '{}') END AS ids
FROM done

-- name: task_ack_claim
-- Delete every task still leased under one whole claim that finished successfully, and drop its
-- lease record. A claim leased the first ready tasks of one bucket and queue in key order, so its
-- rows lie between its first and last (rank, exec_time, id); the token picks them out of that range
-- (rows of other claims interleave only where consumers raced for the same bucket). The id is part
-- of the bounds: tasks enqueued in one transaction share their exec_time, and bounded by (rank,
-- exec_time) alone the scan read every such row of the bucket for each claim (a fan-out of 100,000
-- steps enqueued at once: 40 µs per task, docs/loadtest.md "Plans that depend on the
-- statistics"). No per-task
-- arrays travel, and one range scan replaces a lookup per task. Scalar parameters on purpose: the
-- statement's plan does not depend on their values (the key's range scan), so once prepared the
-- server reuses one generic plan instead of planning each ack (which cost about as much as the ack's
-- own execution for the multi-claim form over unnested arrays this replaced: docs/loadtest.md,
-- "What the hot path was tuned with"). How many rows
-- went, and their ids only when fewer than expected (some lease had been lost; none deleted is an
-- empty array, not NULL).
WITH done AS (
    DELETE FROM shardq_tasks AS t
    WHERE t.bucket = %(bucket)s AND t.queue = %(queue)s
      AND (t.rank, t.exec_time, t.id) >= (%(first_rank)s::INT8, %(first_exec)s::TIMESTAMPTZ, %(first_id)s::UUID)
      AND (t.rank, t.exec_time, t.id) <= (%(last_rank)s::INT8, %(last_exec)s::TIMESTAMPTZ, %(last_id)s::UUID)
      AND t.lease_token = %(token)s::UUID AND t.state = 'leased'
    RETURNING t.id
), closed AS (
    DELETE FROM shardq_leases WHERE token = %(token)s::UUID
)
SELECT count(*) AS acked, CASE WHEN count(*) < %(expected)s::INT4 THEN coalesce(array_agg(id), '{}') END AS ids
FROM done

-- name: task_retry_many
-- Put leased tasks back at now() + delay (scheduled, or ready at once for a zero delay), keeping the
-- error text, fenced by token. With require_expired (the reaper) a task whose lease was extended
-- meanwhile is left alone.
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
FROM unnest(%(buckets)s::INT4[], %(queues)s::TEXT[], %(ranks)s::INT8[], %(exec_times)s::TIMESTAMPTZ[],
            %(ids)s::UUID[], %(tokens)s::UUID[], %(delays)s::FLOAT8[], %(refunds)s::INT4[], %(errors)s::TEXT[],
            %(states)s::TEXT[])
     AS k(bucket, queue, rank, exec_time, id, token, delay, refund, error, state)
WHERE t.bucket = k.bucket AND t.queue = k.queue AND t.rank = k.rank AND t.exec_time = k.exec_time
  AND t.id = k.id AND t.lease_token = k.token AND t.state = k.state AND t.id = ANY(%(ids)s::UUID[])
  AND (NOT %(require_expired)s::BOOL OR t.lease_expires_at <= now())
RETURNING t.id

-- name: task_bury_many
-- Move leased tasks to shardq_dead with their last error, fenced by token (and by expiry for the
-- reaper), in one statement so a task is never in both tables or in neither.
WITH gone AS (
    DELETE FROM shardq_tasks AS t
    USING unnest(%(buckets)s::INT4[], %(queues)s::TEXT[], %(ranks)s::INT8[], %(exec_times)s::TIMESTAMPTZ[],
                 %(ids)s::UUID[], %(tokens)s::UUID[], %(errors)s::TEXT[], %(states)s::TEXT[])
          AS k(bucket, queue, rank, exec_time, id, token, error, state)
    WHERE t.bucket = k.bucket AND t.queue = k.queue AND t.rank = k.rank AND t.exec_time = k.exec_time
      AND t.id = k.id AND t.lease_token = k.token AND t.state = k.state AND t.id = ANY(%(ids)s::UUID[])
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
-- Hand leased tasks back untouched (graceful shutdown): ready again at their old place, and the
-- attempt they were charged at claim time is given back. rank = priority: a claimed task's rank
-- already is (the update stays HOT: an indexed column set to its own value counts as unchanged);
-- a chain step taken at its release is leased at the backlog rank (workflow_steps_acked_take) and moves
-- into the claim's span here.
UPDATE shardq_tasks AS t
SET state = 'ready', rank = t.priority, attempts = t.attempts - 1, lease_token = NULL, lease_expires_at = NULL
FROM unnest(%(buckets)s::INT4[], %(queues)s::TEXT[], %(ranks)s::INT8[], %(exec_times)s::TIMESTAMPTZ[],
            %(ids)s::UUID[], %(tokens)s::UUID[], %(states)s::TEXT[])
     AS k(bucket, queue, rank, exec_time, id, token, state)
WHERE t.bucket = k.bucket AND t.queue = k.queue AND t.rank = k.rank AND t.exec_time = k.exec_time
  AND t.id = k.id AND t.lease_token = k.token AND t.state = k.state AND t.id = ANY(%(ids)s::UUID[])
RETURNING t.id

-- name: task_extend_many
-- Renew leases to now() + seconds, fenced by token; tasks missing from the result have lost theirs.
UPDATE shardq_tasks AS t
SET lease_expires_at = now() + %(lease_seconds)s::FLOAT8 * INTERVAL '1 second'
FROM unnest(%(buckets)s::INT4[], %(queues)s::TEXT[], %(ranks)s::INT8[], %(exec_times)s::TIMESTAMPTZ[],
            %(ids)s::UUID[], %(tokens)s::UUID[], %(states)s::TEXT[])
     AS k(bucket, queue, rank, exec_time, id, token, state)
WHERE t.bucket = k.bucket AND t.queue = k.queue AND t.rank = k.rank AND t.exec_time = k.exec_time
  AND t.id = k.id AND t.lease_token = k.token AND t.state = k.state AND t.id = ANY(%(ids)s::UUID[])
RETURNING t.id, t.lease_expires_at

-- name: task_reap_candidates
-- Tasks of one bucket whose lease has expired, found through the bucket's expired lease records
-- (bounded: the reaper's cost follows expired leases, not table size).
SELECT t.bucket, t.queue, t.rank, t.exec_time, t.id, t.attempts, t.max_attempts, t.lease_token, t.exclusive_key,
       t.workflow_id
FROM shardq_leases AS l
CROSS JOIN LATERAL unnest(l.ranks, l.exec_times, l.ids) AS k(rank, exec_time, id)
JOIN shardq_tasks AS t
  ON t.bucket = l.bucket AND t.queue = l.queue AND t.rank = k.rank AND t.exec_time = k.exec_time AND t.id = k.id
WHERE l.bucket = %(bucket)s AND l.expires_at <= now()
  AND t.lease_token = l.token AND t.state = 'leased' AND t.lease_expires_at <= now()
LIMIT %(limit)s

-- name: lease_records_settle
-- Settle expired lease records of one bucket: drop those with no task still leased under their
-- token, push the others to the latest expiry among their tasks (leases extended since).
WITH due AS (
    SELECT l.token,
           (SELECT max(t.lease_expires_at)
              FROM unnest(l.ranks, l.exec_times, l.ids) AS k(rank, exec_time, id)
              JOIN shardq_tasks AS t
                ON t.bucket = l.bucket AND t.queue = l.queue AND t.rank = k.rank AND t.exec_time = k.exec_time
               AND t.id = k.id
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

-- name: exclusive_keys_lock
-- Serialise everything that adds to or releases an exclusive key's backlog (transaction-scoped
-- advisory locks, taken in a fixed order so two transactions never deadlock). Under READ COMMITTED
-- each later statement of the transaction then sees the other side's committed work, so a backlog
-- entry can never be added just as its key is released and be left waiting forever.
SELECT count(*) AS locked
FROM (SELECT pg_advisory_xact_lock(h)
      FROM (SELECT DISTINCT hashtextextended(k.queue || chr(31) || k.key, 0) AS h
            FROM unnest(%(queues)s::TEXT[], %(keys)s::TEXT[]) AS k(queue, key)
            ORDER BY 1) AS hashes) AS taken

-- name: task_backlog_release
-- For each (queue, exclusive key) whose active task just left, promote the first backlog entry
-- (lowest priority, earliest exec_time) to ready, or to scheduled if its time has not come.
WITH heads AS (
    SELECT DISTINCT ON (t.queue, t.exclusive_key) t.bucket, t.queue, t.rank, t.exec_time, t.id
    FROM shardq_tasks AS t
    JOIN unnest(%(queues)s::TEXT[], %(keys)s::TEXT[]) AS k(queue, key)
      ON t.queue = k.queue AND t.exclusive_key = k.key
    WHERE t.backlogged
    ORDER BY t.queue, t.exclusive_key, t.priority, t.exec_time, t.id
)
UPDATE shardq_tasks AS t
SET backlogged = false,
    state = CASE WHEN t.exec_time > now() THEN 'scheduled' ELSE 'ready' END,
    rank = CASE WHEN t.exec_time > now() THEN %(scheduled_rank)s ELSE t.priority END
FROM heads AS h
WHERE t.bucket = h.bucket AND t.queue = h.queue AND t.rank = h.rank AND t.exec_time = h.exec_time AND t.id = h.id
RETURNING t.id
