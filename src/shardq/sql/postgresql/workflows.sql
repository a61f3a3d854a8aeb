-- name: workflow_tasks_release
-- PostgreSQL's workflow_tasks_release (sql/common/workflows.sql: keep them in step) that also
-- wakes the listening workers of each queue it released steps into (wake true): one pg_notify
-- per queue, delivered when the ack that released them commits, like the producer's wake-up
-- after an enqueue (shardq.notify). Without it an idle listening worker took a released step
-- only at its next poll (up to its idle pause, 1 s by default: docs/workflows.md).
WITH released AS (
    UPDATE shardq_tasks
    SET state = 'ready', rank = priority
    WHERE id = ANY(%(ids)s::UUID[]) AND state = 'waiting'
    RETURNING id, queue
), woken AS (
    SELECT count(pg_notify('shardq_wake', q.queue)) AS sent
    FROM (SELECT DISTINCT r.queue FROM released AS r) AS q
    WHERE %(wake)s::BOOL
)
SELECT r.id FROM released AS r CROSS JOIN woken AS w
