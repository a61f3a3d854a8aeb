"""Queues that keep every task's result: ``shardq_queues.keep_results``.

Revision ID: 0013_queue_keep_results
Revises: 0012_latency_counters
Create Date: 2026-11-27

* ``shardq_queues.keep_results``: while the queue keeps finished tasks
  (``keep_finished_seconds`` > 0), every task of it that succeeds keeps its JSON-encoded return
  value in its history row, as a task declared with ``@app.task(result=True)`` does, whether it
  was deferred from an app or enqueued with ``Client.enqueue`` and run by a plain handler
  (``shardq queue set Q --keep-results``; see :mod:`shardq.lifecycle.history`). False, the default, keeps
  what it kept before.

One schema change (on CockroachDB the connection is in autocommit); a constant default, so
PostgreSQL adds the column without rewriting the table.
"""

from alembic import op

revision = "0013_queue_keep_results"
down_revision = "0012_latency_counters"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE shardq_queues ADD COLUMN IF NOT EXISTS keep_results BOOL NOT NULL DEFAULT false")


def downgrade() -> None:
    op.execute("ALTER TABLE shardq_queues DROP COLUMN IF EXISTS keep_results")
