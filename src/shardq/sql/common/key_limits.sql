-- name: key_limits_of_queue
-- The limits per concurrency key of one queue (shardq.lifecycle.key_limits): a pattern is a key, or
-- a prefix followed by '*'. A few rows per queue (at most KEY_LIMITS_MAX, checked when set); read in
-- the transaction of an enqueue or a release of a limited key, so a change applies at once.
SELECT pattern, max_running FROM shardq_key_limits WHERE queue = %(queue)s ORDER BY pattern LIMIT 1001

-- name: key_limit_set
-- Set (or change) a queue's limit per key for one pattern.
INSERT INTO shardq_key_limits (queue, pattern, max_running) VALUES (%(queue)s, %(pattern)s, %(max_running)s)
ON CONFLICT (queue, pattern) DO UPDATE SET max_running = excluded.max_running

-- name: key_limit_remove
-- Remove a queue's limit per key for one pattern; returns it when there was one.
DELETE FROM shardq_key_limits WHERE queue = %(queue)s AND pattern = %(pattern)s RETURNING pattern
