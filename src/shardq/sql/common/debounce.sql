-- Debounce and throttle by key (shardq.lifecycle.debounce).

-- name: throttle_windows_open
-- Open a throttle window for each key whose window is closed (no row, or one that ended): returns
-- the keys that opened one, whose tasks are then enqueued; a key not returned is inside its window
-- and its task is dropped. One statement per batch; keys are distinct within it.
INSERT INTO shardq_throttle_windows (queue, key, until)
SELECT %(queue)s, w.key, now() + w.seconds * INTERVAL '1 second'
FROM unnest(%(keys)s::TEXT[], %(seconds)s::FLOAT8[]) AS w(key, seconds)
ON CONFLICT (queue, key) DO UPDATE SET until = excluded.until
WHERE shardq_throttle_windows.until <= now()
RETURNING key

-- name: task_debounce_replace
-- Debounce (shardq.lifecycle.debounce): the queue's task with this dedupe key that has not started
-- (ready or scheduled) takes the newest payload and becomes due again ``seconds`` from now; returns
-- its id when there was one. Its exec_time, part of the key, moves, so the row is rewritten.
UPDATE shardq_tasks
SET payload = %(payload)s::BYTEA, exec_time = now() + %(seconds)s::FLOAT8 * INTERVAL '1 second', state = 'scheduled',
    rank = %(scheduled_rank)s
WHERE queue = %(queue)s AND dedupe_key = %(key)s AND state IN ('ready', 'scheduled') AND NOT backlogged
RETURNING id
