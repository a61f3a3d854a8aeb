-- name: queue_ensure
-- Create a queue with default settings unless it exists (a queue otherwise comes into being on its first enqueue).
INSERT INTO shardq_queues (name) VALUES (%(queue)s) ON CONFLICT (name) DO NOTHING

-- name: queue_get
-- One queue's settings, or no row.
SELECT name, lease_seconds, max_attempts, backoff_base, backoff_cap, paused_enqueue, paused_dequeue
FROM shardq_queues WHERE name = %(queue)s

-- name: queue_list
-- Every known queue's settings, by name.
SELECT name, lease_seconds, max_attempts, backoff_base, backoff_cap, paused_enqueue, paused_dequeue
FROM shardq_queues ORDER BY name
