-- Browsing and acting on a queue's live tasks from the dashboard (shardq.admin.browse). The reads of a
-- page are in the engines' browse.sql; these act on tasks named by id (the unique index
-- shardq_tasks_id, migration 0001) and re-check the state, so a task that moved on meanwhile
-- (claimed, finished, cancelled) is left alone and not returned.

-- name: task_run_now_many
-- Make scheduled tasks of one queue ready now (run now, or retry now for a task waiting for its
-- retry backoff): rank = priority, as a promotion does, and run time now.
UPDATE shardq_tasks AS t
SET state = 'ready', rank = t.priority, exec_time = now()
WHERE t.id = ANY(%(ids)s::UUID[]) AND t.queue = %(queue)s::TEXT AND t.state = 'scheduled'
RETURNING t.id

-- name: task_priority_set_many
-- Give tasks of one queue that are not running a new priority. A ready task's rank is its
-- priority, so it moves to its new place in claim order; a scheduled or backlogged one keeps its
-- rank (it is not claimable yet) and gets the priority when promoted or released. Leased tasks
-- are left alone: their worker addresses them by the key the claim returned.
UPDATE shardq_tasks AS t
SET priority = %(priority)s::INT8,
    rank = CASE WHEN t.state = 'ready' THEN %(priority)s::INT8 ELSE t.rank END
WHERE t.id = ANY(%(ids)s::UUID[]) AND t.queue = %(queue)s::TEXT AND t.state IN ('ready', 'scheduled', 'backlog')
RETURNING t.id
