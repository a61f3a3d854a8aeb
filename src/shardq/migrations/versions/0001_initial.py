"""shardq's tables: tasks (bucketed / hash-sharded), dead letters, queue settings.

Revision ID: 0001
Revises:
Create Date: 2026-11-22

Key order is the whole design, and it differs between the two databases:

* ``rank`` orders claims and keeps everything that is not claimable out of the claim's span:
  a ready task's rank is its ``priority`` (lower first; ``exec_time`` orders within it); a task
  scheduled for later has rank ``RANK_SCHEDULED`` (the largest INT8) and one waiting in an
  exclusive key's backlog ``RANK_BACKLOG`` (one less), both beyond every priority. Due scheduled
  tasks are promoted (state 'ready', rank = priority) by consumers and the reaper; the promotion's
  own span (rank = RANK_SCHEDULED, exec_time <= now()) is contiguous too. So neither the number of
  tasks scheduled for later nor the priorities in use change what a claim scans.
* CockroachDB: ``PRIMARY KEY (state, queue, rank, exec_time, id) USING HASH``. The state is in the
  key so that a claim's span (shard = n, state = 'ready', queue = q) holds only claimable rows and ``LIMIT … SKIP LOCKED`` is a hard limit; with the state outside the key
  CockroachDB's SKIP LOCKED locks every row its batch scans (cockroachdb#121917). The reaper's
  span (state = 'leased') holds only leased rows. Every column stays in the default column family:
  SKIP LOCKED refuses tables with several families.
* PostgreSQL: ``PRIMARY KEY (bucket, queue, rank, exec_time, id)`` with ``bucket`` an ordinary column the
  database fills at insert (a DEFAULT, so Spark and plain SQL inserts need not know about it) and
  the state a plain column. PostgreSQL's SKIP LOCKED stops at the limit and never locks rows its
  filter rejects, and leased rows are few, so the filter is cheap, while keeping the state out of
  every index makes a claim a HOT update. Measured on this machine (DESIGN.md): state as a column
  63.7k tasks/s, state in the key 33.6k, state as a column plus a partial index on leased rows for
  the reaper 52.6k. The reaper therefore finds expired leases through ``shardq_leases``: one row
  per claimed *batch*, written by the claim statement itself and dropped when the worker settles
  the batch, indexed by (bucket, expires_at). That costs one small insert and one delete per batch
  of up to a few hundred tasks instead of an index entry per task, and keeps the reaper's cost
  proportional to expired leases rather than table size.
* ``fillfactor = 80`` on PostgreSQL leaves room on each page for the HOT versions claims create.
"""

from alembic import context, op

from shardq.migrations import migration_engine

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

DEFAULT_BUCKETS = 16


def _buckets() -> int:
    return int(context.config.attributes.get("buckets") or DEFAULT_BUCKETS)


def _hash_sharded() -> bool:
    return migration_engine().ddl.hash_sharded


def upgrade() -> None:
    buckets = _buckets()
    if _hash_sharded():
        op.execute(
            f"""
            CREATE TABLE IF NOT EXISTS shardq_tasks (
                state STRING NOT NULL,
                queue STRING NOT NULL,
                rank INT8 NOT NULL,
                exec_time TIMESTAMPTZ NOT NULL,
                id UUID NOT NULL,
                priority INT8 NOT NULL DEFAULT 0,
                exclusive_key STRING NULL,
                backlogged BOOL NOT NULL DEFAULT false,
                attempts INT4 NOT NULL DEFAULT 0,
                max_attempts INT4 NOT NULL DEFAULT 25,
                lease_expires_at TIMESTAMPTZ NULL,
                lease_token UUID NULL,
                payload BYTES NOT NULL,
                dedupe_key STRING NULL,
                created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
                last_error STRING NULL,
                PRIMARY KEY (state, queue, rank, exec_time, id) USING HASH WITH (bucket_count = {buckets})
            )
            """
        )
    else:
        op.execute(
            f"""
            CREATE TABLE IF NOT EXISTS shardq_tasks (
                bucket INT4 NOT NULL DEFAULT floor(random() * {buckets})::INT4,
                queue TEXT NOT NULL,
                rank INT8 NOT NULL,
                exec_time TIMESTAMPTZ NOT NULL,
                id UUID NOT NULL,
                state TEXT NOT NULL,
                priority INT8 NOT NULL DEFAULT 0,
                exclusive_key TEXT NULL,
                backlogged BOOL NOT NULL DEFAULT false,
                attempts INT4 NOT NULL DEFAULT 0,
                max_attempts INT4 NOT NULL DEFAULT 25,
                lease_expires_at TIMESTAMPTZ NULL,
                lease_token UUID NULL,
                payload BYTEA NOT NULL,
                dedupe_key TEXT NULL,
                created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
                last_error TEXT NULL,
                PRIMARY KEY (bucket, queue, rank, exec_time, id)
            ) WITH (fillfactor = 80)
            """
        )
        op.execute(
            """
            CREATE TABLE IF NOT EXISTS shardq_leases (
                token UUID PRIMARY KEY,
                bucket INT4 NOT NULL,
                queue TEXT NOT NULL,
                expires_at TIMESTAMPTZ NOT NULL,
                ranks INT8[] NOT NULL,
                exec_times TIMESTAMPTZ[] NOT NULL,
                ids UUID[] NOT NULL
            )
            """
        )
        op.execute("CREATE INDEX IF NOT EXISTS shardq_leases_due ON shardq_leases (bucket, expires_at)")
        op.execute(
            """
            CREATE TABLE IF NOT EXISTS shardq_buckets (
                singleton BOOL PRIMARY KEY DEFAULT true CHECK (singleton),
                bucket_count INT4 NOT NULL CHECK (bucket_count BETWEEN 2 AND 2048),
                resizing_from INT4 NULL,
                changed_at TIMESTAMPTZ NOT NULL DEFAULT now()
            )
            """
        )
        op.execute(
            f"INSERT INTO shardq_buckets (singleton, bucket_count) VALUES (true, {buckets}) ON CONFLICT DO NOTHING"
        )
    # Dedupe: at most one live task per (queue, key); partial, so tasks without a key cost nothing.
    op.execute(
        "CREATE UNIQUE INDEX IF NOT EXISTS shardq_tasks_dedupe ON shardq_tasks (queue, dedupe_key) "
        "WHERE dedupe_key IS NOT NULL"
    )
    # Lookup by id alone (cancel, inspection); ids are random, so this spreads on CockroachDB too.
    op.execute("CREATE UNIQUE INDEX IF NOT EXISTS shardq_tasks_id ON shardq_tasks (id)")
    # Exclusive keys: at most one task per (queue, key) outside the backlog, so at most one can be
    # leased. The predicate names `backlogged`, which a claim never changes, not `state`, which it
    # does: on PostgreSQL a column in any index predicate would make every claim a non-HOT update.
    op.execute(
        "CREATE UNIQUE INDEX IF NOT EXISTS shardq_tasks_exclusive ON shardq_tasks (queue, exclusive_key) "
        "WHERE exclusive_key IS NOT NULL AND NOT backlogged"
    )
    # The backlog of each exclusive key, in release order.
    op.execute(
        "CREATE INDEX IF NOT EXISTS shardq_tasks_backlog ON shardq_tasks (queue, exclusive_key, priority, exec_time) "
        "WHERE backlogged"
    )
    text, blob = migration_engine().ddl.text, migration_engine().ddl.blob
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS shardq_dead (
            id UUID PRIMARY KEY,
            queue {text} NOT NULL,
            payload {blob} NOT NULL,
            attempts INT4 NOT NULL,
            max_attempts INT4 NOT NULL,
            dedupe_key {text} NULL,
            priority INT8 NOT NULL DEFAULT 0,
            exclusive_key {text} NULL,
            created_at TIMESTAMPTZ NOT NULL,
            died_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            last_error {text} NULL
        )
        """
    )
    op.execute("CREATE INDEX IF NOT EXISTS shardq_dead_by_queue ON shardq_dead (queue, died_at)")
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS shardq_queues (
            name {text} PRIMARY KEY,
            lease_seconds FLOAT8 NOT NULL DEFAULT 30 CHECK (lease_seconds > 0),
            max_attempts INT4 NOT NULL DEFAULT 25 CHECK (max_attempts > 0),
            backoff_base FLOAT8 NOT NULL DEFAULT 1 CHECK (backoff_base > 0),
            backoff_cap FLOAT8 NOT NULL DEFAULT 3600 CHECK (backoff_cap > 0),
            retry_jitter FLOAT8 NOT NULL DEFAULT 1 CHECK (retry_jitter BETWEEN 0 AND 1),
            exclusive_latest_only BOOL NOT NULL DEFAULT false,
            paused_enqueue BOOL NOT NULL DEFAULT false,
            paused_dequeue BOOL NOT NULL DEFAULT false,
            created_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )
        """
    )


def downgrade() -> None:
    for table in ("shardq_queues", "shardq_dead", "shardq_buckets", "shardq_leases", "shardq_tasks"):
        op.execute(f"DROP TABLE IF EXISTS {table}")
