-- PostgreSQL: the bucket leads the key (bucket, queue, exec_time, id) and the state is a plain
-- column, so ready and scheduled counts are capped range scans of one (bucket, queue) in exec_time
-- order (the few leased rows interleaved there are skipped by the state filter), and leased tasks
-- are found through shardq_leases (one record per claimed batch), never by scanning for a state.

-- name: stats_snapshot_begin
-- First statement of the stats transaction: every count reads one snapshot.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY

-- name: stats_depth_many
-- Per (queue, bucket), each count capped at cap: tasks in the active span (rank < backlog_rank:
-- ready and leased rows, ranked by priority; a claim leaves the key alone), scheduled tasks already
-- due (not promoted yet: they count as ready) and not yet due, and backlog entries. The counts need
-- no state filter, so they are index-only scans of the primary key that stop at the LIMIT (a state
-- filter would turn every entry into a heap visit: docs/introspection.md, "Why it is cheap"); the caller subtracts the leased tasks found through the
-- lease records. ORDER BY keeps them plain index scans: a bitmap scan would collect the whole
-- range before the LIMIT applies. oldest_ready is the earliest exec_time among the first ready row
-- of each priority (a loose index scan over at most rank_cap priorities) and the first due
-- scheduled row; ranks says how many priorities were visited.
-- The backlog rank holds an exclusive key's backlog entries and workflow steps waiting for their
-- parents (shardq.workflows.steps): backlog counts both, index-only; waiting counts the steps among
-- them with a state filter (heap visits, over that one span only, capped), and the caller
-- subtracts it.
SELECT q.name AS queue, b.bucket, c.active, c.due_scheduled, c.scheduled, c.backlog, c.waiting,
       c.oldest_due_scheduled, h.oldest_ready, h.ranks
FROM unnest(%(queues)s::TEXT[]) AS q(name)
CROSS JOIN unnest(%(buckets)s::INT4[]) AS b(bucket)
CROSS JOIN LATERAL (
    SELECT
        (SELECT count(*) FROM (
            SELECT 1 FROM shardq_tasks AS t
            WHERE t.bucket = b.bucket AND t.queue = q.name AND t.rank < %(backlog_rank)s
            ORDER BY t.rank, t.exec_time LIMIT %(cap)s) AS x) AS active,
        (SELECT count(*) FROM (
            SELECT 1 FROM shardq_tasks AS t
            WHERE t.bucket = b.bucket AND t.queue = q.name AND t.rank = %(scheduled_rank)s AND t.exec_time <= now()
            ORDER BY t.exec_time LIMIT %(cap)s) AS x) AS due_scheduled,
        (SELECT count(*) FROM (
            SELECT 1 FROM shardq_tasks AS t
            WHERE t.bucket = b.bucket AND t.queue = q.name AND t.rank = %(scheduled_rank)s AND t.exec_time > now()
            ORDER BY t.exec_time LIMIT %(cap)s) AS x) AS scheduled,
        (SELECT count(*) FROM (
            SELECT 1 FROM shardq_tasks AS t
            WHERE t.bucket = b.bucket AND t.queue = q.name AND t.rank = %(backlog_rank)s
            ORDER BY t.exec_time LIMIT %(cap)s) AS x) AS backlog,
        (SELECT count(*) FROM (
            SELECT 1 FROM shardq_tasks AS t
            WHERE t.bucket = b.bucket AND t.queue = q.name AND t.rank = %(backlog_rank)s AND t.state = 'waiting'
            ORDER BY t.exec_time LIMIT %(cap)s) AS x) AS waiting,
        (SELECT t.exec_time FROM shardq_tasks AS t
            WHERE t.bucket = b.bucket AND t.queue = q.name AND t.rank = %(scheduled_rank)s AND t.exec_time <= now()
            ORDER BY t.exec_time LIMIT 1) AS oldest_due_scheduled
) AS c
CROSS JOIN LATERAL (
    WITH RECURSIVE heads (rank, exec_time, n) AS (
        SELECT f.rank, f.exec_time, 1
        FROM (SELECT t.rank, t.exec_time FROM shardq_tasks AS t
              WHERE t.bucket = b.bucket AND t.queue = q.name AND t.rank < %(backlog_rank)s AND t.state = 'ready'
              ORDER BY t.rank, t.exec_time LIMIT 1) AS f
        UNION ALL
        SELECT nx.rank, nx.exec_time, h.n + 1
        FROM heads AS h
        CROSS JOIN LATERAL (
            SELECT t.rank, t.exec_time FROM shardq_tasks AS t
            WHERE t.bucket = b.bucket AND t.queue = q.name AND t.rank > h.rank AND t.rank < %(backlog_rank)s
              AND t.state = 'ready'
            ORDER BY t.rank, t.exec_time LIMIT 1) AS nx
        WHERE h.n < %(rank_cap)s
    )
    SELECT min(exec_time) AS oldest_ready, count(*) AS ranks FROM heads
) AS h

-- name: stats_leased_by_bucket
-- Leased tasks per (queue, bucket), found through the lease records (whose size follows what is in
-- flight, not the table), at most limit in all; expired: those whose lease has run out (their
-- worker is likely gone; a sweep returns them to the queue). taken: those leased at the backlog rank
-- (chain steps taken at their release, workflow_steps_acked_take), which the depth's backlog span holds
-- where the active span holds every other leased task.
SELECT x.queue, x.bucket, count(*) AS leased, count(*) FILTER (WHERE x.expired) AS expired,
       count(*) FILTER (WHERE x.taken) AS taken
FROM (
    SELECT l.queue, l.bucket, t.lease_expires_at <= now() AS expired, t.rank = %(backlog_rank)s AS taken
    FROM shardq_leases AS l
    CROSS JOIN LATERAL unnest(l.ranks, l.exec_times, l.ids) AS k(rank, exec_time, id)
    JOIN shardq_tasks AS t
      ON t.bucket = l.bucket AND t.queue = l.queue AND t.rank = k.rank AND t.exec_time = k.exec_time AND t.id = k.id
    WHERE l.bucket = ANY(%(buckets)s::INT4[]) AND t.lease_token = l.token AND t.state = 'leased'
    LIMIT %(limit)s
) AS x
GROUP BY x.queue, x.bucket
