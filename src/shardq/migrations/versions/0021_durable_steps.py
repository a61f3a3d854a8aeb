"""Durable execution: a task's recorded steps and the signals sent to it.

Revision ID: 0021_durable_steps
Revises: 0020_workflow_only_shard
Create Date: 2026-12-08

* ``shardq_task_steps``: one row per completed step of a running durable task (``ctx.step``,
  ``ctx.sleep``, ``ctx.wait_for``; see docs/durable.md), keyed by the task's id and the step's
  index in the handler's sequence. ``value`` is the step's JSON text (NULL: a wait not answered
  yet), ``version`` the task's declared version when it was written, ``wake_at`` when a sleep or a
  wait ends. Written only by the task's lease holder (every write is fenced by the lease token in
  its own statement); read once per run, by the run's first step. Rows of tasks that are no longer
  live nor dead are pruned (``task_steps_prune``), never deleted by the ack: plain tasks pay
  nothing.
* ``shardq_task_signals``: signals sent to a task (``client.signal``), keyed by task, name and the
  signal's id (the sender's idempotency key when it gives one), consumed in the order sent by one
  wait each (``consumed_at``). A consumed row is kept until the task is pruned so that a sender's
  retry of the same id is a no-op, not a second signal.

One statement, one schema change: on CockroachDB the connection is in autocommit.
"""

from alembic import op

from shardq.migrations import migration_engine

revision = "0021_durable_steps"
down_revision = "0020_workflow_only_shard"
branch_labels = None
depends_on = None


def upgrade() -> None:
    text = migration_engine().ddl.text
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS shardq_task_steps (
            task_id UUID NOT NULL,
            idx INT4 NOT NULL,
            name {text} NOT NULL,
            value {text} NULL,
            version {text} NULL,
            wake_at TIMESTAMPTZ NULL,
            recorded_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            PRIMARY KEY (task_id, idx)
        )
        """
    )
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS shardq_task_signals (
            task_id UUID NOT NULL,
            name {text} NOT NULL,
            id UUID NOT NULL,
            payload {text} NOT NULL,
            sent_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            consumed_at TIMESTAMPTZ NULL,
            PRIMARY KEY (task_id, name, id)
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS shardq_task_signals")
    op.execute("DROP TABLE IF EXISTS shardq_task_steps")
