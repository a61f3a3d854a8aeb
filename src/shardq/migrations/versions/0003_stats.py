"""Per-minute activity counters for `shardq stats` / `shardq top`: rates, failures, handler time.

Revision ID: 0003_stats
Revises: 0002
Create Date: 2026-11-23

Depth (ready, scheduled, leased, dead) is *not* kept here: it is counted from the tasks table with
bounded, per-bucket scans (see :mod:`shardq.admin.stats`), so it is right whatever wrote the rows.
Rates need history, which the tasks table cannot give (finished tasks are deleted), so the writers
add what they did to one row per (queue, minute, slot):

* the producer, from memory: at once for a queue it has not counted yet, then at most once a
  second (one small statement, whatever the enqueue rate);
* each worker, from memory, every couple of seconds (one statement per flush, whatever the
  throughput) — acks, retries, dead letters, handler time, and the handler capacity it offered;
* the reaper, once per run (expired leases and the dead letters they caused).

``slot`` spreads concurrent writers of the same queue and minute over several rows, so they do not
queue up on one row lock (PostgreSQL) or contend on one key (CockroachDB); readers sum the slots.
Rows older than an hour are pruned by the reaper and the workers in bounded batches; the table
stays at most (queues x 60 x slots) rows.
"""

from alembic import op

from shardq.migrations import migration_engine

revision = "0003_stats"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    text = migration_engine().ddl.text
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS shardq_stats (
            queue {text} NOT NULL,
            minute TIMESTAMPTZ NOT NULL,
            slot INT4 NOT NULL,
            enqueued INT8 NOT NULL DEFAULT 0,
            acked INT8 NOT NULL DEFAULT 0,
            retried INT8 NOT NULL DEFAULT 0,
            expired INT8 NOT NULL DEFAULT 0,
            dead INT8 NOT NULL DEFAULT 0,
            handled INT8 NOT NULL DEFAULT 0,
            handler_seconds FLOAT8 NOT NULL DEFAULT 0,
            capacity_seconds FLOAT8 NOT NULL DEFAULT 0,
            PRIMARY KEY (queue, minute, slot)
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS shardq_stats")
