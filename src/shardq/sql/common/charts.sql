-- The dashboard's charts: activity per queue over time, from the per-minute counters
-- (shardq_stats, kept an hour) and their hourly sums (shardq_stats_hourly, migration 0009, kept
-- 8 days). Each read is bounded by its range: at most 60 minutes or 192 hours per queue.

-- name: stats_hourly_rollup
-- Sum the per-minute counters of the current and the previous hour into their hourly rows. Run
-- just before the counters are pruned, by every pruner: an hour's sums only grow while its minutes
-- are all kept, and shrink once pruning has begun, so each column keeps the largest sum seen
-- (GREATEST): the whole hour's, as long as one rollup ran after the hour ended and before its first
-- minute was pruned (an hour later; pruners run every minute or so).
INSERT INTO shardq_stats_hourly AS h
    (queue, hour, enqueued, acked, retried, expired, dead, handled, handler_seconds, first_starts,
     start_wait_seconds, lead_acks, lead_seconds)
SELECT queue, date_trunc('hour', minute), sum(enqueued)::INT8, sum(acked)::INT8, sum(retried)::INT8,
       sum(expired)::INT8, sum(dead)::INT8, sum(handled)::INT8, sum(handler_seconds)::FLOAT8,
       sum(first_starts)::INT8, sum(start_wait_seconds)::FLOAT8, sum(lead_acks)::INT8, sum(lead_seconds)::FLOAT8
FROM shardq_stats
WHERE minute >= date_trunc('hour', now()) - INTERVAL '1 hour'
GROUP BY queue, date_trunc('hour', minute)
ON CONFLICT (queue, hour) DO UPDATE SET
    enqueued = GREATEST(h.enqueued, excluded.enqueued),
    acked = GREATEST(h.acked, excluded.acked),
    retried = GREATEST(h.retried, excluded.retried),
    expired = GREATEST(h.expired, excluded.expired),
    dead = GREATEST(h.dead, excluded.dead),
    handled = GREATEST(h.handled, excluded.handled),
    handler_seconds = GREATEST(h.handler_seconds, excluded.handler_seconds),
    first_starts = GREATEST(h.first_starts, excluded.first_starts),
    start_wait_seconds = GREATEST(h.start_wait_seconds, excluded.start_wait_seconds),
    lead_acks = GREATEST(h.lead_acks, excluded.lead_acks),
    lead_seconds = GREATEST(h.lead_seconds, excluded.lead_seconds)
RETURNING queue

-- name: stats_hourly_prune
-- Delete up to limit hourly rows older than keep_seconds; called until it deletes fewer.
DELETE FROM shardq_stats_hourly
WHERE (queue, hour) IN (
    SELECT queue, hour FROM shardq_stats_hourly
    WHERE hour < now() - %(keep_seconds)s::FLOAT8 * INTERVAL '1 second'
    LIMIT %(limit)s
)
RETURNING hour

-- name: stats_minutes_of_queue
-- One queue's activity per minute over the last minutes minutes (summed over writer slots), and
-- the database's current minute (the chart's right edge).
SELECT minute AS at, sum(enqueued)::INT8 AS enqueued, sum(acked)::INT8 AS acked,
       (sum(retried) + sum(expired) + sum(dead))::INT8 AS failed, sum(first_starts)::INT8 AS first_starts,
       sum(start_wait_seconds)::FLOAT8 AS start_wait_seconds, sum(lead_acks)::INT8 AS lead_acks,
       sum(lead_seconds)::FLOAT8 AS lead_seconds, date_trunc('minute', now()) AS now_at
FROM shardq_stats
WHERE queue = %(queue)s::TEXT AND minute >= date_trunc('minute', now()) - %(minutes)s::INT8 * INTERVAL '1 minute'
GROUP BY minute
ORDER BY minute

-- name: stats_hours_of_queue
-- One queue's activity per hour over the last hours hours, and the database's current hour.
SELECT hour AS at, enqueued, acked, retried + expired + dead AS failed, first_starts, start_wait_seconds,
       lead_acks, lead_seconds, date_trunc('hour', now()) AS now_at
FROM shardq_stats_hourly
WHERE queue = %(queue)s::TEXT AND hour >= date_trunc('hour', now()) - %(hours)s::INT8 * INTERVAL '1 hour'
ORDER BY hour
