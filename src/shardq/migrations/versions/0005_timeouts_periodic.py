"""Execution timeouts and periodic tasks.

Revision ID: 0005_timeouts_periodic
Revises: 0004_tasks_fillfactor
Create Date: 2026-11-25

* ``shardq_queues.timeout_seconds``: a queue's execution timeout (NULL: none). A task running longer
  is settled as a failed attempt (see :mod:`shardq.worker`).
* ``shardq_stats.timeouts``: attempts that ran out of time, per queue and minute, beside the other
  activity counters.
* ``shardq_periodic``: the slots of periodic schedules that have been taken, one row per
  (schedule name, slot time). A worker enqueues a slot's task only if its insert of that row is the
  one that succeeds (compare-and-set on the primary key), so each slot runs once however many
  workers schedule it, also after its task was acked and deleted. Old rows are pruned.

Each statement is one schema change: on CockroachDB the connection is in autocommit (see
``migrations/env.py``). ``ALTER TABLE … ADD COLUMN … NOT NULL DEFAULT`` on CockroachDB is in
``pkg/sql/logictest/testdata/logic_test/alter_table`` ("Add a non NULL column with a default
value").
"""

from alembic import op

from shardq.migrations import migration_engine

revision = "0005_timeouts_periodic"
down_revision = "0004_tasks_fillfactor"
branch_labels = None
depends_on = None


def upgrade() -> None:
    text = migration_engine().ddl.text
    op.execute("ALTER TABLE shardq_queues ADD COLUMN timeout_seconds FLOAT8")
    op.execute("ALTER TABLE shardq_stats ADD COLUMN timeouts INT8 NOT NULL DEFAULT 0")
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS shardq_periodic (
            name {text} NOT NULL,
            slot TIMESTAMPTZ NOT NULL,
            task_id UUID,
            taken_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            PRIMARY KEY (name, slot)
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS shardq_periodic")
    op.execute("ALTER TABLE shardq_stats DROP COLUMN timeouts")
    op.execute("ALTER TABLE shardq_queues DROP COLUMN timeout_seconds")
