-- name: dead_list
-- Dead-lettered tasks of one queue, oldest death first.
SELECT id, queue, payload, attempts, last_error, died_at, created_at
FROM shardq_dead WHERE queue = %(queue)s
ORDER BY died_at, id
LIMIT %(limit)s

-- name: dead_list_after
-- The next keyset page of dead_list: the dead tasks of one queue after (after_at, after_id) in
-- (died_at, id) order. The redundant died_at >= after_at lets the (queue, died_at) index seek
-- to the page instead of reading the pages before it.
SELECT id, queue, payload, attempts, last_error, died_at, created_at
FROM shardq_dead
WHERE queue = %(queue)s AND died_at >= %(after_at)s::TIMESTAMPTZ
  AND (died_at > %(after_at)s::TIMESTAMPTZ OR id > %(after_id)s::UUID)
ORDER BY died_at, id
LIMIT %(limit)s

-- name: dead_ids_page
-- One keyset page of dead task ids of a queue, for requeueing everything in bounded batches.
SELECT id FROM shardq_dead
WHERE queue = %(queue)s AND id > %(after)s::UUID
ORDER BY id
LIMIT %(limit)s

-- name: dead_requeue_ids
-- Move the named dead tasks back into the queue as fresh, due tasks (attempts start over). A dead
-- task whose dedupe key is live again, or whose exclusive key is busy, stays dead rather than run
-- twice or alongside; only moved rows are deleted from shardq_dead, so nothing is lost either way.
WITH chosen AS (
    SELECT id, queue, payload, max_attempts, dedupe_key, created_at, priority, exclusive_key
    FROM shardq_dead WHERE queue = %(queue)s AND id = ANY(%(ids)s::UUID[])
), revived AS (
    INSERT INTO shardq_tasks (state, rank, queue, exec_time, id, priority, exclusive_key, attempts, max_attempts,
                              payload, dedupe_key, created_at)
    SELECT 'ready', priority, queue, now(), id, priority, exclusive_key, 0, max_attempts, payload, dedupe_key,
           created_at
    FROM chosen
    ON CONFLICT DO NOTHING
    RETURNING id
)
DELETE FROM shardq_dead WHERE id IN (SELECT id FROM revived)
RETURNING id

-- name: dead_purge_batch
-- Delete up to limit dead tasks of a queue; called until it deletes nothing.
DELETE FROM shardq_dead
WHERE id IN (SELECT id FROM shardq_dead WHERE queue = %(queue)s LIMIT %(limit)s)
RETURNING id

-- name: dead_get
-- One dead-lettered task by id (its primary key), or no row.
SELECT id, queue, payload, attempts, max_attempts, last_error, died_at, created_at, priority, exclusive_key,
       dedupe_key
FROM shardq_dead WHERE id = %(id)s::UUID
