-- PostgreSQL: online bucket resizing (shardq.resize). The count lives in shardq_buckets; the bucket
-- column's DEFAULT spreads new rows over it. A grow only changes both. A shrink changes both, keeps
-- resizing_from = the old extent so consumers and reapers go on visiting every bucket that may still
-- hold rows, moves the rows that are not leased out of the dropped buckets in bounded batches, waits
-- for leased rows there to be settled (acks address rows by their whole key, bucket included, so
-- leased rows stay put), and only then clears resizing_from.

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
-- Move up to limit tasks that are not leased (ready, scheduled, or waiting in an exclusive key's
-- backlog) out of one dropped bucket to a random remaining bucket. SKIP LOCKED: rows a claim or a
-- promotion is taking right now are skipped (and vice versa: a locking read that meets a moved row
-- re-checks bucket = b on the new version and drops it). Leased rows are never moved.
-- A backlog row is moved only while this statement holds its key's lock (the same advisory lock as
-- exclusive_keys_lock, tried, never waited for): releasing a key addresses the backlog head by its
-- whole key, bucket included, and must not race a move of that row.
WITH picked AS MATERIALIZED (
    SELECT ctid
    FROM shardq_tasks
    WHERE bucket = %(bucket)s AND state <> 'leased'
      AND CASE WHEN backlogged
               THEN pg_try_advisory_xact_lock(hashtextextended(queue || chr(31) || exclusive_key, 0))
               ELSE true END
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE shardq_tasks AS t
SET bucket = floor(random() * %(bucket_count)s)::INT4
WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM picked)) AND t.state <> 'leased'
RETURNING t.id

-- name: task_count_beyond
-- Rows still in buckets >= bucket_count (a range scan of the primary key): movable ones (not leased)
-- and leased ones.
SELECT count(*) FILTER (WHERE state <> 'leased') AS movable,
       count(*) FILTER (WHERE state = 'leased') AS leased
FROM shardq_tasks
WHERE bucket >= %(bucket_count)s

-- name: lease_delete_beyond
-- Drop lease records of dropped buckets once no task lives there (the reaper stops visiting those
-- buckets, so nothing else would ever sweep them). Only run when task_count_beyond found nothing.
DELETE FROM shardq_leases WHERE bucket >= %(bucket_count)s
