-- name: task_get
-- One task by id whatever its state (ready, scheduled, leased or waiting in a key's backlog), for
-- inspection: one descent of the unique id index; no row when the id is not in the tasks table.
SELECT id, queue, state, priority, exclusive_key, backlogged, attempts, max_attempts, exec_time, lease_expires_at,
       payload, dedupe_key, created_at, last_error
FROM shardq_tasks WHERE id = %(id)s::UUID
