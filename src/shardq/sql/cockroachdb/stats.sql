-- CockroachDB: the state leads the hash-sharded key, so each count below is one capped span of one
-- shard ({shard_col} = bucket, state, queue[, exec_time range]): no residual filter, no row outside
-- the span is read. The stats transaction is a follower read (AS OF SYSTEM TIME
-- follower_read_timestamp(), about 4.8 s old), which never waits on claimers' intents nor makes
-- them restart (reference/cockroachdb.md "AS OF SYSTEM TIME / follower reads for stats").

-- name: stats_snapshot_historical
-- First statement of the stats transaction: read everything as of the follower read timestamp.
SET TRANSACTION AS OF SYSTEM TIME follower_read_timestamp()

-- name: stats_snapshot_begin
-- First statement of a current (not historical) stats transaction.
SET TRANSACTION READ ONLY

-- name: stats_depth_one
-- One (queue, bucket), each count capped at cap: ready, leased, backlog and waiting (workflow
-- steps waiting for their parents) tasks (one span each;
-- expired: the leased ones whose lease has run out, read from the leased span),
-- scheduled tasks already due (not promoted yet: they count as ready) and not yet due, and the
-- earliest due scheduled task. The oldest ready task is found by stats_ready_head_after.
SELECT
    (SELECT count(*) FROM (
        SELECT 1 FROM shardq_tasks
        WHERE {shard_col} = %(bucket)s AND state = 'ready' AND queue = %(queue)s
        LIMIT %(cap)s) AS c) AS ready,
    (SELECT count(*) FROM (
        SELECT 1 FROM shardq_tasks
        WHERE {shard_col} = %(bucket)s AND state = 'scheduled' AND queue = %(queue)s
          AND rank = %(scheduled_rank)s AND exec_time <= now()
        LIMIT %(cap)s) AS c) AS due_scheduled,
    (SELECT count(*) FROM (
        SELECT 1 FROM shardq_tasks
        WHERE {shard_col} = %(bucket)s AND state = 'scheduled' AND queue = %(queue)s
          AND rank = %(scheduled_rank)s AND exec_time > now()
        LIMIT %(cap)s) AS c) AS scheduled,
    (SELECT count(*) FROM (
        SELECT 1 FROM shardq_tasks
        WHERE {shard_col} = %(bucket)s AND state = 'leased' AND queue = %(queue)s
        LIMIT %(cap)s) AS c) AS leased,
    (SELECT count(*) FROM (
        SELECT 1 FROM shardq_tasks
        WHERE {shard_col} = %(bucket)s AND state = 'leased' AND queue = %(queue)s AND lease_expires_at <= now()
        LIMIT %(cap)s) AS c) AS expired,
    (SELECT count(*) FROM (
        SELECT 1 FROM shardq_tasks
        WHERE {shard_col} = %(bucket)s AND state = 'backlog' AND queue = %(queue)s
        LIMIT %(cap)s) AS c) AS backlog,
    (SELECT count(*) FROM (
        SELECT 1 FROM shardq_tasks
        WHERE {shard_col} = %(bucket)s AND state = 'waiting' AND queue = %(queue)s
        LIMIT %(cap)s) AS c) AS waiting,
    (SELECT min(exec_time) FROM shardq_tasks
        WHERE {shard_col} = %(bucket)s AND state = 'scheduled' AND queue = %(queue)s
          AND rank = %(scheduled_rank)s AND exec_time <= now()) AS oldest_due_scheduled

-- name: stats_ready_head_after
-- The first ready task of one (queue, bucket) with a rank above after: the head of the next
-- priority in the (shard, 'ready', queue, rank, exec_time) span. Walking it priority by priority
-- finds the oldest ready task in one short scan per priority in use.
SELECT rank, exec_time FROM shardq_tasks
WHERE {shard_col} = %(bucket)s AND state = 'ready' AND queue = %(queue)s AND rank > %(after)s
ORDER BY rank, exec_time
LIMIT 1
