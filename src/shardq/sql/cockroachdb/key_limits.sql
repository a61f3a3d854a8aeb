-- name: key_limit_promote
-- CockroachDB's key_limit_promote (sql/postgresql/key_limits.sql): the row is named by its state, the
-- first column of the primary key, where PostgreSQL names it by bucket (as task_backlog_release).
WITH head AS (
    SELECT t.state, t.queue, t.rank, t.exec_time, t.id
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
WHERE t.state = h.state AND t.queue = h.queue AND t.rank = h.rank AND t.exec_time = h.exec_time AND t.id = h.id
RETURNING t.id
