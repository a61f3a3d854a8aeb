-- name: queue_ensure
-- Create a queue with default settings unless it exists (a queue otherwise comes into being on its first enqueue).
INSERT INTO shardq_queues (name) VALUES (%(queue)s) ON CONFLICT (name) DO NOTHING

-- name: queue_get
-- One queue's settings, or no row.
SELECT name, lease_seconds, max_attempts, backoff_base, backoff_cap, retry_jitter, exclusive_latest_only,
       paused_enqueue, paused_dequeue, timeout_seconds
FROM shardq_queues WHERE name = %(queue)s

-- name: queue_list
-- Every known queue's settings, by name.
SELECT name, lease_seconds, max_attempts, backoff_base, backoff_cap, retry_jitter, exclusive_latest_only,
       paused_enqueue, paused_dequeue, timeout_seconds
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
                           ELSE coalesce(%(timeout_seconds)s::FLOAT8, timeout_seconds) END
WHERE name = %(queue)s
RETURNING name, lease_seconds, max_attempts, backoff_base, backoff_cap, retry_jitter, exclusive_latest_only,
          paused_enqueue, paused_dequeue, timeout_seconds
