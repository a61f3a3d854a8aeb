-- Introspection. Depth is counted from the tasks table with bounded scans: every count has a LIMIT
-- (the per-bucket cap), so a stats call costs at most cap rows per (queue, bucket, state) whatever
-- the table's size, and a count that reaches the cap is reported as "at least". Rates come from
-- shardq_stats, per-minute counters the producer, workers and reaper add to (migration 0004).

-- name: stats_now
-- The statement time of the stats snapshot (the transaction's now(): on CockroachDB's follower read
-- that is the historical read time) and the minute it falls in.
SELECT now() AS as_of, date_trunc('minute', now()) AS minute

-- name: stats_dead_count
-- Dead letters of one queue, counted up to cap through the (queue, died_at) index.
SELECT count(*) AS dead FROM (SELECT 1 FROM shardq_dead WHERE queue = %(queue)s LIMIT %(cap)s) AS d

-- name: stats_window
-- Activity per queue over the current minute and the minutes full minutes before it, summed over
-- writer slots.
SELECT queue,
       sum(enqueued)::INT8 AS enqueued,
       sum(acked)::INT8 AS acked,
       sum(retried)::INT8 AS retried,
       sum(expired)::INT8 AS expired,
       sum(dead)::INT8 AS dead,
       sum(handled)::INT8 AS handled,
       sum(handler_seconds)::FLOAT8 AS handler_seconds,
       sum(capacity_seconds)::FLOAT8 AS capacity_seconds,
       sum(timeouts)::INT8 AS timeouts,
       sum(throttled)::INT8 AS throttled,
       sum(first_starts)::INT8 AS first_starts,
       sum(start_wait_seconds)::FLOAT8 AS start_wait_seconds,
       sum(lead_acks)::INT8 AS lead_acks,
       sum(lead_seconds)::FLOAT8 AS lead_seconds
FROM shardq_stats
WHERE minute >= date_trunc('minute', now()) - %(minutes)s::INT8 * INTERVAL '1 minute'
GROUP BY queue

-- name: stats_add_many
-- Add one writer's counts (one row per queue, queues unique) to the current minute's row of its
-- slot. Called once per flush by workers and once per run by the reaper, never per task.
INSERT INTO shardq_stats AS s
    (queue, minute, slot, enqueued, acked, retried, expired, dead, handled, handler_seconds, capacity_seconds,
     timeouts, throttled, first_starts, start_wait_seconds, lead_acks, lead_seconds)
SELECT k.queue, date_trunc('minute', now()), %(slot)s::INT4, k.enqueued, k.acked, k.retried, k.expired, k.dead,
       k.handled, k.handler_seconds, k.capacity_seconds, k.timeouts, k.throttled, k.first_starts,
       k.start_wait_seconds, k.lead_acks, k.lead_seconds
FROM unnest(%(queues)s::TEXT[], %(enqueued)s::INT8[], %(acked)s::INT8[], %(retried)s::INT8[], %(expired)s::INT8[],
            %(dead)s::INT8[], %(handled)s::INT8[], %(handler_seconds)s::FLOAT8[], %(capacity_seconds)s::FLOAT8[],
            %(timeouts)s::INT8[], %(throttled)s::INT8[], %(first_starts)s::INT8[], %(start_wait_seconds)s::FLOAT8[],
            %(lead_acks)s::INT8[], %(lead_seconds)s::FLOAT8[])
     AS k(queue, enqueued, acked, retried, expired, dead, handled, handler_seconds, capacity_seconds, timeouts,
          throttled, first_starts, start_wait_seconds, lead_acks, lead_seconds)
ON CONFLICT (queue, minute, slot) DO UPDATE SET
    enqueued = s.enqueued + excluded.enqueued,
    acked = s.acked + excluded.acked,
    retried = s.retried + excluded.retried,
    expired = s.expired + excluded.expired,
    dead = s.dead + excluded.dead,
    handled = s.handled + excluded.handled,
    handler_seconds = s.handler_seconds + excluded.handler_seconds,
    capacity_seconds = s.capacity_seconds + excluded.capacity_seconds,
    timeouts = s.timeouts + excluded.timeouts,
    throttled = s.throttled + excluded.throttled,
    first_starts = s.first_starts + excluded.first_starts,
    start_wait_seconds = s.start_wait_seconds + excluded.start_wait_seconds,
    lead_acks = s.lead_acks + excluded.lead_acks,
    lead_seconds = s.lead_seconds + excluded.lead_seconds

-- name: stats_prune
-- Delete up to limit counter rows older than keep_seconds; called until it deletes fewer.
DELETE FROM shardq_stats
WHERE (queue, minute, slot) IN (
    SELECT queue, minute, slot FROM shardq_stats
    WHERE minute < now() - %(keep_seconds)s::FLOAT8 * INTERVAL '1 second'
    LIMIT %(limit)s
)
RETURNING slot
