-- name: stats_tasks_by_queue
-- Per-queue counts of due, scheduled and leased tasks and the age of the oldest due one.
SELECT queue,
       count(*) FILTER (WHERE state = 'ready' AND exec_time <= now()) AS ready,
       count(*) FILTER (WHERE state = 'ready' AND exec_time > now()) AS scheduled,
       count(*) FILTER (WHERE state = 'leased') AS leased,
       extract(epoch FROM now() - min(exec_time) FILTER (WHERE state = 'ready' AND exec_time <= now()))::FLOAT8
           AS oldest_ready_age_s
FROM shardq_tasks
GROUP BY queue

-- name: stats_dead_by_queue
-- Dead-letter counts per queue.
SELECT queue, count(*) AS dead FROM shardq_dead GROUP BY queue
