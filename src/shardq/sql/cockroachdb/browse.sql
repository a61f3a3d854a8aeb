-- CockroachDB: browsing a queue's tasks page by page for the dashboard (shardq.admin.browse). The state
-- leads the hash-sharded key, so each state is its own span per shard: a page scans at most
-- %(scan)s keys per shard of ({shard_col}, state, queue, rank, exec_time, id) after a cursor and
-- filters only what that scan returned (hit), however large the table.

-- name: task_browse_span
-- One page's scan of one state's span, ascending: per shard, the first scan keys of (shard,
-- state, queue, rank between rank_lo and rank_hi) after the cursor, with whether each matches the
-- filters (NULL when not given; error_like is an ILIKE pattern the caller escapes).
SELECT b.bucket, s.rank, s.exec_time, s.id, s.hit
FROM unnest(%(buckets)s::INT8[]) AS b(bucket)
CROSS JOIN LATERAL (
    SELECT t.rank, t.exec_time, t.id,
           (%(priority)s::INT8 IS NULL OR t.priority = %(priority)s::INT8)
           AND (%(exclusive_key)s::STRING IS NULL OR t.exclusive_key = %(exclusive_key)s::STRING)
           AND (%(dedupe_key)s::STRING IS NULL OR t.dedupe_key = %(dedupe_key)s::STRING)
           AND (%(created_before)s::TIMESTAMPTZ IS NULL OR t.created_at <= %(created_before)s::TIMESTAMPTZ)
           AND (%(error_like)s::STRING IS NULL OR t.last_error ILIKE %(error_like)s::STRING) AS hit
    FROM shardq_tasks AS t
    WHERE t.{shard_col} = b.bucket AND t.state = %(state)s::STRING AND t.queue = %(queue)s::STRING
      AND t.rank >= %(rank_lo)s::INT8 AND t.rank <= %(rank_hi)s::INT8
      AND (t.rank, t.exec_time, t.id) > (%(after_rank)s::INT8, %(after_time)s::TIMESTAMPTZ, %(after_id)s::UUID)
    ORDER BY t.rank, t.exec_time, t.id
    LIMIT %(scan)s::INT8
) AS s

-- name: task_browse_span_desc
-- task_browse_span in descending key order: per shard, the scan keys before the cursor.
SELECT b.bucket, s.rank, s.exec_time, s.id, s.hit
FROM unnest(%(buckets)s::INT8[]) AS b(bucket)
CROSS JOIN LATERAL (
    SELECT t.rank, t.exec_time, t.id,
           (%(priority)s::INT8 IS NULL OR t.priority = %(priority)s::INT8)
           AND (%(exclusive_key)s::STRING IS NULL OR t.exclusive_key = %(exclusive_key)s::STRING)
           AND (%(dedupe_key)s::STRING IS NULL OR t.dedupe_key = %(dedupe_key)s::STRING)
           AND (%(created_before)s::TIMESTAMPTZ IS NULL OR t.created_at <= %(created_before)s::TIMESTAMPTZ)
           AND (%(error_like)s::STRING IS NULL OR t.last_error ILIKE %(error_like)s::STRING) AS hit
    FROM shardq_tasks AS t
    WHERE t.{shard_col} = b.bucket AND t.state = %(state)s::STRING AND t.queue = %(queue)s::STRING
      AND t.rank >= %(rank_lo)s::INT8 AND t.rank <= %(rank_hi)s::INT8
      AND (t.rank, t.exec_time, t.id) < (%(after_rank)s::INT8, %(after_time)s::TIMESTAMPTZ, %(after_id)s::UUID)
    ORDER BY t.rank DESC, t.exec_time DESC, t.id DESC
    LIMIT %(scan)s::INT8
) AS s

-- name: task_browse_leased
-- A queue's leased tasks (expired_only: only those whose lease has run out), at most cap: the
-- (state = 'leased', queue) span of every shard, which holds only in-flight work.
SELECT t.{shard_col} AS bucket, t.rank, t.exec_time, t.id,
       (%(priority)s::INT8 IS NULL OR t.priority = %(priority)s::INT8)
       AND (%(exclusive_key)s::STRING IS NULL OR t.exclusive_key = %(exclusive_key)s::STRING)
       AND (%(dedupe_key)s::STRING IS NULL OR t.dedupe_key = %(dedupe_key)s::STRING)
       AND (%(created_before)s::TIMESTAMPTZ IS NULL OR t.created_at <= %(created_before)s::TIMESTAMPTZ)
       AND (%(error_like)s::STRING IS NULL OR t.last_error ILIKE %(error_like)s::STRING) AS hit
FROM shardq_tasks AS t
WHERE t.state = 'leased' AND t.queue = %(queue)s::STRING
  AND (NOT %(expired_only)s::BOOL OR t.lease_expires_at <= now())
LIMIT %(cap)s::INT8

-- name: task_browse_rows
-- What a page shows of each task it lists, by id (the unique id index), with its whole key and
-- lease token (a requeue of an expired lease is fenced by them) and the payload's size, not the
-- payload.
SELECT {shard_col} AS bucket, id, queue, state, rank, priority, exclusive_key, dedupe_key, attempts, max_attempts,
       exec_time, lease_expires_at, lease_token, created_at, last_error, octet_length(payload) AS payload_bytes
FROM shardq_tasks WHERE id = ANY(%(ids)s::UUID[])
