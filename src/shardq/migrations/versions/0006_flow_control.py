"""Flow control: global concurrency and rate limits per queue.

Revision ID: 0006_flow_control
Revises: 0005_timeouts_periodic
Create Date: 2026-11-25

* ``shardq_queues.concurrency_limit``: at most this many tasks of the queue run at once across
  every worker (NULL: no limit). ``rate_limit`` / ``rate_burst``: at most ``rate_limit`` task starts
  per second, in bursts of up to ``rate_burst`` (NULL: the rate itself). See docs/flow-control.md.
* ``shardq_slots``: one row per concurrency slot of a limited queue. A slot is free once
  ``free_at`` has passed: the worker that holds it (``token``) keeps ``free_at`` a lease ahead
  while it has work and puts it back to the epoch when it goes idle, so a worker that dies gives
  its slots back at most one lease later, with nobody cleaning up. ``free_at`` is
  part of the key so that "free slots of a queue" is one span of the key, ``(queue, free_at <=
  now())``, read in key order: a SKIP LOCKED scan with a hard LIMIT and no residual filter, which
  CockroachDB needs to lock only the rows it returns (cockroachdb#121917; see
  sql/common/flow.sql). ``(queue, slot)`` is unique.
* ``shardq_rate_tokens``: the token bucket of a rate-limited queue, one row per queue.
* ``shardq_stats.throttled``: claims a limit refused, per queue and minute.

Each statement is one schema change: on CockroachDB the connection is in autocommit (see
``migrations/env.py``).
"""

from alembic import op

from shardq.migrations import migration_engine

revision = "0006_flow_control"
down_revision = "0005_timeouts_periodic"
branch_labels = None
depends_on = None


def upgrade() -> None:
    text = migration_engine().ddl.text
    op.execute("ALTER TABLE shardq_queues ADD COLUMN concurrency_limit INT4")
    op.execute("ALTER TABLE shardq_queues ADD COLUMN rate_limit INT4")
    op.execute("ALTER TABLE shardq_queues ADD COLUMN rate_burst INT4")
    op.execute("ALTER TABLE shardq_stats ADD COLUMN throttled INT8 NOT NULL DEFAULT 0")
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS shardq_slots (
            queue {text} NOT NULL,
            free_at TIMESTAMPTZ NOT NULL DEFAULT '1970-01-01 00:00:00+00',
            slot INT4 NOT NULL,
            token UUID,
            PRIMARY KEY (queue, free_at, slot),
            UNIQUE (queue, slot)
        )
        """
    )
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS shardq_rate_tokens (
            queue {text} PRIMARY KEY,
            tokens FLOAT8 NOT NULL,
            refilled_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS shardq_rate_tokens")
    op.execute("DROP TABLE IF EXISTS shardq_slots")
    op.execute("ALTER TABLE shardq_stats DROP COLUMN throttled")
    op.execute("ALTER TABLE shardq_queues DROP COLUMN rate_burst")
    op.execute("ALTER TABLE shardq_queues DROP COLUMN rate_limit")
    op.execute("ALTER TABLE shardq_queues DROP COLUMN concurrency_limit")
