-- name: stats_tasks_by_queue
-- Per-queue counts by state and the age of the oldest due task (a scheduled task that is due but
-- not promoted yet counts as ready: it is claimable as soon as a consumer passes).
SELECT queue,
       count(*) FILTER (WHERE state = 'ready' OR (state = 'scheduled' AND exec_time <= now())) AS ready,
       count(*) FILTER (WHERE state = 'scheduled' AND exec_time > now()) AS scheduled,
       count(*) FILTER (WHERE state = 'leased') AS leased,
       count(*) FILTER (WHERE state = 'backlog') AS backlog,
       extract(epoch FROM now() - min(exec_time) FILTER (WHERE state IN ('ready', 'scheduled') AND exec_time <= now()))::FLOAT8
           AS oldest_ready_age_s
FROM shardq_tasks
GROUP BY queue

-- name: stats_dead_by_queue
-- Dead-letter counts per queue.
SELECT queue, count(*) AS dead FROM shardq_dead GROUP BY queue
