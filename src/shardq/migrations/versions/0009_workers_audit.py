"""The dashboard's worker registry, audit log and hourly activity counters.

Revision ID: 0009_workers_audit
Revises: 0007_lease_sweeps
Create Date: 2026-11-26

* ``shardq_workers``: one row per live worker process, written by the worker itself with one
  upsert per registry beat (:mod:`shardq.maintenance.worker_registry`): host, pid, queues,
  concurrency, tasks in hand and running, the lease tokens of its claims in hand (so a leased
  task names its worker without any write on the claim path), when it started and its last beat.
  A worker deletes its row when it stops; rows whose beat is old are pruned by the other workers.
  Small (one row per worker), read whole.
* ``shardq_stats_hourly``: the per-minute activity counters (``shardq_stats``, kept an hour)
  summed per queue and hour, kept :data:`shardq.maintenance.pruning.KEEP_HOURLY_SECONDS` (8
  days), for the dashboard's 24 h and 7 d charts. Written by whoever prunes the counters, just
  before pruning (see sql/common/charts.sql).
* ``shardq_audit``: what was done from the dashboard (who, what, to what, when), newest first by
  ``(at, id)``. Written only by operators' actions, so its index on time is no write hotspot.

Each statement is one schema change: on CockroachDB the connection is in autocommit (see
``migrations/env.py``).
"""

from alembic import op

from shardq.migrations import migration_engine

revision = "0009_workers_audit"
down_revision = "0008_task_history"
branch_labels = None
depends_on = None


def upgrade() -> None:
    text = migration_engine().ddl.text
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS shardq_workers (
            id UUID PRIMARY KEY,
            host {text} NOT NULL,
            pid INT4 NOT NULL,
            queues {text}[] NOT NULL,
            concurrency INT4 NOT NULL,
            in_hand INT4 NOT NULL,
            running INT4 NOT NULL,
            tokens UUID[] NOT NULL,
            started_at TIMESTAMPTZ NOT NULL,
            beat_at TIMESTAMPTZ NOT NULL
        )
        """
    )
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS shardq_audit (
            id UUID PRIMARY KEY,
            at TIMESTAMPTZ NOT NULL,
            actor {text} NOT NULL,
            action {text} NOT NULL,
            target {text} NOT NULL,
            detail {text} NULL
        )
        """
    )
    op.execute("CREATE INDEX IF NOT EXISTS shardq_audit_at ON shardq_audit (at, id)")
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS shardq_stats_hourly (
            queue {text} NOT NULL,
            hour TIMESTAMPTZ NOT NULL,
            enqueued INT8 NOT NULL,
            acked INT8 NOT NULL,
            retried INT8 NOT NULL,
            expired INT8 NOT NULL,
            dead INT8 NOT NULL,
            handled INT8 NOT NULL,
            handler_seconds FLOAT8 NOT NULL,
            PRIMARY KEY (queue, hour)
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS shardq_stats_hourly")
    op.execute("DROP TABLE IF EXISTS shardq_audit")
    op.execute("DROP TABLE IF EXISTS shardq_workers")
