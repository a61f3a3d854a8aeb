-- The dashboard's way from a task to its workflow (a task's page links to the workflow's).

-- name: workflow_step_of_task
-- The workflow and step a task is a step of, or no row (one read of the unique task_id index).
SELECT workflow_id, step FROM shardq_workflow_steps WHERE task_id = %(id)s::UUID
