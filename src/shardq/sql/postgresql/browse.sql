-- PostgreSQL: browsing a queue's tasks page by page for the dashboard (shardq.admin.browse). Every
-- statement reads a bounded number of index entries however large the table: a page scans at most
-- %(scan)s keys per bucket in key order (rank, exec_time, id) after a cursor, and filters only what
-- that scan returned (hit). So a selective filter costs the same as none; it fills pages more
-- slowly, and the caller says how far the scan got. Leased tasks are found through the lease
-- records (one per claimed batch), never by scanning the active span for a state.

-- name: task_browse_span
-- One page's scan of one state's span, ascending: per bucket, the first scan keys of (bucket,
-- queue, rank between rank_lo and rank_hi) after the cursor (after_rank, after_time, after_id),
-- with whether each matches the state and the filters. The keys are read first, alone: an
-- index-only scan of the primary key in key order that stops at the LIMIT (with the filters in
-- the same scan, the planner may prefer a bitmap scan that reads the whole span, then sorts);
-- then each key's row is read for the filters. The ready span also holds the few leased rows (a
-- claim leaves the key alone): they are scanned keys, not hits. Filters are NULL when not given;
-- error_like is an ILIKE pattern (the caller escapes it).
SELECT b.bucket, s.rank, s.exec_time, s.id, s.hit
FROM unnest(%(buckets)s::INT4[]) AS b(bucket)
CROSS JOIN LATERAL (
    SELECT k.rank, k.exec_time, k.id,
           t.state = %(state)s::TEXT
           AND (%(priority)s::INT8 IS NULL OR t.priority = %(priority)s::INT8)
           AND (%(exclusive_key)s::TEXT IS NULL OR t.exclusive_key = %(exclusive_key)s::TEXT)
           AND (%(dedupe_key)s::TEXT IS NULL OR t.dedupe_key = %(dedupe_key)s::TEXT)
           AND (%(created_before)s::TIMESTAMPTZ IS NULL OR t.created_at <= %(created_before)s::TIMESTAMPTZ)
           AND (%(error_like)s::TEXT IS NULL OR t.last_error ILIKE %(error_like)s::TEXT) AS hit
    FROM (
        SELECT x.rank, x.exec_time, x.id
        FROM shardq_tasks AS x
        WHERE x.bucket = b.bucket AND x.queue = %(queue)s::TEXT
          AND x.rank >= %(rank_lo)s::INT8 AND x.rank <= %(rank_hi)s::INT8
          AND (x.rank, x.exec_time, x.id) > (%(after_rank)s::INT8, %(after_time)s::TIMESTAMPTZ, %(after_id)s::UUID)
        ORDER BY x.rank, x.exec_time, x.id
        LIMIT %(scan)s::INT8
    ) AS k
    LEFT JOIN shardq_tasks AS t  -- a key whose row went meanwhile (acked) still counts as scanned
      ON t.bucket = b.bucket AND t.queue = %(queue)s::TEXT AND t.rank = k.rank AND t.exec_time = k.exec_time
     AND t.id = k.id
) AS s

-- name: task_browse_span_desc
-- task_browse_span in descending key order (latest run time first within the lowest-priority
-- rank first): the scan keys before the cursor.
SELECT b.bucket, s.rank, s.exec_time, s.id, s.hit
FROM unnest(%(buckets)s::INT4[]) AS b(bucket)
CROSS JOIN LATERAL (
    SELECT k.rank, k.exec_time, k.id,
           t.state = %(state)s::TEXT
           AND (%(priority)s::INT8 IS NULL OR t.priority = %(priority)s::INT8)
           AND (%(exclusive_key)s::TEXT IS NULL OR t.exclusive_key = %(exclusive_key)s::TEXT)
           AND (%(dedupe_key)s::TEXT IS NULL OR t.dedupe_key = %(dedupe_key)s::TEXT)
           AND (%(created_before)s::TIMESTAMPTZ IS NULL OR t.created_at <= %(created_before)s::TIMESTAMPTZ)
           AND (%(error_like)s::TEXT IS NULL OR t.last_error ILIKE %(error_like)s::TEXT) AS hit
    FROM (
        SELECT x.rank, x.exec_time, x.id
        FROM shardq_tasks AS x
        WHERE x.bucket = b.bucket AND x.queue = %(queue)s::TEXT
          AND x.rank >= %(rank_lo)s::INT8 AND x.rank <= %(rank_hi)s::INT8
          AND (x.rank, x.exec_time, x.id) < (%(after_rank)s::INT8, %(after_time)s::TIMESTAMPTZ, %(after_id)s::UUID)
        ORDER BY x.rank DESC, x.exec_time DESC, x.id DESC
        LIMIT %(scan)s::INT8
    ) AS k
    LEFT JOIN shardq_tasks AS t  -- a key whose row went meanwhile (acked) still counts as scanned
      ON t.bucket = b.bucket AND t.queue = %(queue)s::TEXT AND t.rank = k.rank AND t.exec_time = k.exec_time
     AND t.id = k.id
) AS s

-- name: task_browse_leased
-- A queue's leased tasks (expired_only: only those whose lease has run out), found through the
-- lease records, at most cap of them: the key and whether each matches the filters. In-flight
-- work is bounded by the workers' concurrency, so the caller sorts and pages this set itself.
SELECT l.bucket, t.rank, t.exec_time, t.id,
       (%(priority)s::INT8 IS NULL OR t.priority = %(priority)s::INT8)
       AND (%(exclusive_key)s::TEXT IS NULL OR t.exclusive_key = %(exclusive_key)s::TEXT)
       AND (%(dedupe_key)s::TEXT IS NULL OR t.dedupe_key = %(dedupe_key)s::TEXT)
       AND (%(created_before)s::TIMESTAMPTZ IS NULL OR t.created_at <= %(created_before)s::TIMESTAMPTZ)
       AND (%(error_like)s::TEXT IS NULL OR t.last_error ILIKE %(error_like)s::TEXT) AS hit
FROM shardq_leases AS l
CROSS JOIN LATERAL unnest(l.ranks, l.exec_times, l.ids) AS k(rank, exec_time, id)
JOIN shardq_tasks AS t
  ON t.bucket = l.bucket AND t.queue = l.queue AND t.rank = k.rank AND t.exec_time = k.exec_time AND t.id = k.id
WHERE l.queue = %(queue)s::TEXT AND t.lease_token = l.token AND t.state = 'leased'
  AND (NOT %(expired_only)s::BOOL OR t.lease_expires_at <= now())
LIMIT %(cap)s::INT8

-- name: task_browse_rows
-- What a page shows of each task it lists, by id (the unique id index), with its whole key and
-- lease token (a requeue of an expired lease is fenced by them) and the payload's size, not the
-- payload.
SELECT bucket, id, queue, state, rank, priority, exclusive_key, dedupe_key, attempts, max_attempts, exec_time,
       lease_expires_at, lease_token, created_at, last_error, octet_length(payload) AS payload_bytes
FROM shardq_tasks WHERE id = ANY(%(ids)s::UUID[])
