-- PostgreSQL: online bucket resizing (shardq.resize). The count lives in shardq_buckets; the bucket
-- column's DEFAULT spreads new rows over it. A grow only changes both. A shrink changes both, keeps
-- resizing_from = the old extent so consumers and reapers go on visiting every bucket that may still
-- hold rows, moves ready rows out of the dropped buckets in bounded batches, waits for leased rows
-- there to be settled (acks address rows by their whole key, bucket included, so leased rows stay
-- put), and only then clears resizing_from.

-- name: resize_lock_try
-- Take the session-level advisory lock that serialises resizes (the constant is shardq's own key;
-- the lock lives as long as the resizing connection, so a crashed resize never leaves it behind).
SELECT pg_try_advisory_lock(7305861295011432001) AS locked

-- name: resize_lock_release
-- Release the resize lock taken by resize_lock_try on this connection.
SELECT pg_advisory_unlock(7305861295011432001) AS released

-- name: lock_timeout_set_local
-- Bound how long the statements of the current transaction wait for a lock (milliseconds), so a
-- resize never queues every claim behind it for long.
SELECT set_config('lock_timeout', %(ms)s::TEXT, true) AS lock_timeout

-- name: buckets_lock_get
-- The current count and resize state, row-locked for the rest of the transaction.
SELECT bucket_count, resizing_from FROM shardq_buckets FOR UPDATE

-- name: buckets_update
-- Record the new count, and the extent rows may still occupy while a shrink is moving them.
UPDATE shardq_buckets
SET bucket_count = %(bucket_count)s, resizing_from = %(resizing_from)s, changed_at = now()

-- name: bucket_default_set
-- Spread new rows over bucket_count buckets. DDL takes no bind parameters: {bucket_count} is an
-- integer literal filled by Session.execute_ddl. Plan caches of every session are invalidated by the
-- ALTER, so prepared inserts pick the new default up at once.
ALTER TABLE shardq_tasks ALTER COLUMN bucket SET DEFAULT floor(random() * {bucket_count})::INT4

-- name: task_move_out_batch
-- Move up to limit ready tasks (due or scheduled) of one dropped bucket to a random remaining bucket.
-- SKIP LOCKED: rows a claim is taking right now are skipped (and vice versa; a claim that meets a
-- moved row re-checks bucket = b on the new version and drops it). Leased rows are never moved.
WITH picked AS MATERIALIZED (
    SELECT bucket, queue, exec_time, id
    FROM shardq_tasks
    WHERE bucket = %(bucket)s AND state = 'ready'
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE shardq_tasks AS t
SET bucket = floor(random() * %(bucket_count)s)::INT4
FROM picked AS p
WHERE t.bucket = p.bucket AND t.queue = p.queue AND t.exec_time = p.exec_time AND t.id = p.id
  AND t.state = 'ready'
RETURNING t.id

-- name: task_count_beyond
-- Rows still in buckets >= bucket_count (a range scan of the primary key), by state.
SELECT count(*) FILTER (WHERE state = 'ready') AS ready,
       count(*) FILTER (WHERE state = 'leased') AS leased
FROM shardq_tasks
WHERE bucket >= %(bucket_count)s

-- name: lease_delete_beyond
-- Drop lease records of dropped buckets once no task lives there (the reaper stops visiting those
-- buckets, so nothing else would ever sweep them). Only run when task_count_beyond found nothing.
DELETE FROM shardq_leases WHERE bucket >= %(bucket_count)s
