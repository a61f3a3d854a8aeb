-- name: queue_ensure
-- Create a queue with default settings unless it exists (a queue otherwise comes into being on its first enqueue).
INSERT INTO shardq_queues (name) VALUES (%(queue)s) ON CONFLICT (name) DO NOTHING

-- name: queue_get
-- One queue's settings, or no row.
SELECT name, lease_seconds, max_attempts, backoff_base, backoff_cap, retry_jitter, exclusive_latest_only,
       paused_enqueue, paused_dequeue, timeout_seconds, concurrency_limit, rate_limit, rate_burst,
       keep_finished_seconds, keep_results
FROM shardq_queues WHERE name = %(queue)s

-- name: queue_list
-- Every known queue's settings, by name.
SELECT name, lease_seconds, max_attempts, backoff_base, backoff_cap, retry_jitter, exclusive_latest_only,
       paused_enqueue, paused_dequeue, timeout_seconds, concurrency_limit, rate_limit, rate_burst,
       keep_finished_seconds, keep_results
FROM shardq_queues ORDER BY name

-- name: queue_update
-- Change the settings given (NULL leaves a setting as it is); the queue must exist.
UPDATE shardq_queues
SET lease_seconds = coalesce(%(lease_seconds)s, lease_seconds),
    max_attempts = coalesce(%(max_attempts)s, max_attempts),
    backoff_base = coalesce(%(backoff_base)s, backoff_base),
    backoff_cap = coalesce(%(backoff_cap)s, backoff_cap),
    retry_jitter = coalesce(%(retry_jitter)s, retry_jitter),
    exclusive_latest_only = coalesce(%(exclusive_latest_only)s, exclusive_latest_only),
    paused_enqueue = coalesce(%(paused_enqueue)s, paused_enqueue),
    paused_dequeue = coalesce(%(paused_dequeue)s, paused_dequeue),
    timeout_seconds = CASE WHEN %(timeout_clear)s THEN NULL
                           ELSE coalesce(%(timeout_seconds)s::FLOAT8, timeout_seconds) END,
    -- 0 removes a limit; a rate set without a burst goes back to the default burst (the rate)
    concurrency_limit = CASE WHEN %(concurrency)s::INT4 IS NULL THEN concurrency_limit
                             WHEN %(concurrency)s::INT4 = 0 THEN NULL ELSE %(concurrency)s::INT4 END,
    rate_limit = CASE WHEN %(rate)s::INT4 IS NULL THEN rate_limit
                      WHEN %(rate)s::INT4 = 0 THEN NULL ELSE %(rate)s::INT4 END,
    rate_burst = CASE WHEN %(rate)s::INT4 IS NULL THEN rate_burst
                      WHEN %(rate)s::INT4 = 0 THEN NULL ELSE %(burst)s::INT4 END,
    keep_finished_seconds = coalesce(%(keep_finished_seconds)s::FLOAT8, keep_finished_seconds),
    keep_results = coalesce(%(keep_results)s::BOOL, keep_results)
WHERE name = %(queue)s
RETURNING name, lease_seconds, max_attempts, backoff_base, backoff_cap, retry_jitter, exclusive_latest_only,
          paused_enqueue, paused_dequeue, timeout_seconds, concurrency_limit, rate_limit, rate_burst,
          keep_finished_seconds, keep_results
