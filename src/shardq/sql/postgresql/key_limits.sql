-- name: key_limit_promote
-- A key slot of a limited concurrency key came free (shardq.lifecycle.key_limits): the first task
-- waiting for the key (its backlog under the waiting key; lowest priority, earliest exec_time) takes
-- the slot: its exclusive key becomes the slot's, and it is ready, or scheduled if its time has not
-- come. Run only under the key's lock (exclusive_keys_lock), like task_backlog_release.
WITH head AS (
    SELECT t.bucket, t.queue, t.rank, t.exec_time, t.id
    FROM shardq_tasks AS t
    WHERE t.queue = %(queue)s AND t.exclusive_key = %(waiting)s AND t.backlogged
    ORDER BY t.priority, t.exec_time, t.id
    LIMIT 1
)
UPDATE shardq_tasks AS t
SET backlogged = false,
    exclusive_key = %(slot)s,
    state = CASE WHEN t.exec_time > now() THEN 'scheduled' ELSE 'ready' END,
    rank = CASE WHEN t.exec_time > now() THEN %(scheduled_rank)s ELSE t.priority END
FROM head AS h
WHERE t.bucket = h.bucket AND t.queue = h.queue AND t.rank = h.rank AND t.exec_time = h.exec_time AND t.id = h.id
RETURNING t.id
