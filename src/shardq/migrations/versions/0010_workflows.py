"""Workflows: steps that wait for their parents, released in their last parent's ack.

Revision ID: 0010_workflows
Revises: 0009_workers_audit
Create Date: 2026-11-26

* ``shardq_tasks.workflow_id``: the workflow a task is a step of (NULL for every other task). The
  claim returns it, so the settler sends a step's ack through :mod:`shardq.workflows.steps`; a task
  outside every workflow pays one NULL column, nothing more.
* ``shardq_workflows``: one row per workflow (id, name, when enqueued, when cancelled).
* ``shardq_workflow_steps``: one row per step, keyed (workflow_id, step): its task id, task name
  and queue, its state (``waiting``, ``ready`` — released, its task runs or waits to —,
  ``succeeded``, ``dead``, ``cancelled``), ``waiting_on`` (parents not yet succeeded),
  ``on_failure`` (a step that runs only when a parent died), and for a step with parents its
  task's payload, priority and max_attempts: a step cancelled because a parent died is enqueued
  again from them when that parent is requeued from the dead letters.
* ``shardq_workflow_edges``: one row per (parent, child) edge of a workflow's graph, read by
  parent when a step finishes.

A waiting step's task row exists from the start in state ``waiting`` at rank ``RANK_BACKLOG``,
beyond every priority, so it sits outside every claim's span (see migration 0001). Each
statement is one schema change: on CockroachDB the connection is in autocommit.
"""

from alembic import op

from shardq.migrations import migration_engine

revision = "0010_workflows"
down_revision = "0009_workers_audit"
branch_labels = None
depends_on = None


def upgrade() -> None:
    text, blob = migration_engine().ddl.text, migration_engine().ddl.blob
    op.execute("ALTER TABLE shardq_tasks ADD COLUMN IF NOT EXISTS workflow_id UUID NULL")
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS shardq_workflows (
            id UUID PRIMARY KEY,
            name {text} NOT NULL,
            created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            cancelled_at TIMESTAMPTZ NULL
        )
        """
    )
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS shardq_workflow_steps (
            workflow_id UUID NOT NULL,
            step {text} NOT NULL,
            task_id UUID NOT NULL,
            task {text} NOT NULL,
            queue {text} NOT NULL,
            state {text} NOT NULL,
            waiting_on INT4 NOT NULL,
            on_failure BOOL NOT NULL DEFAULT false,
            finished_at TIMESTAMPTZ NULL,
            payload {blob} NULL,
            priority INT8 NOT NULL DEFAULT 0,
            max_attempts INT4 NULL,
            PRIMARY KEY (workflow_id, step)
        )
        """
    )
    op.execute("CREATE UNIQUE INDEX IF NOT EXISTS shardq_workflow_steps_task ON shardq_workflow_steps (task_id)")
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS shardq_workflow_edges (
            workflow_id UUID NOT NULL,
            parent {text} NOT NULL,
            child {text} NOT NULL,
            PRIMARY KEY (workflow_id, parent, child)
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS shardq_workflow_edges")
    op.execute("DROP TABLE IF EXISTS shardq_workflow_steps")
    op.execute("DROP TABLE IF EXISTS shardq_workflows")
    op.execute("ALTER TABLE shardq_tasks DROP COLUMN IF EXISTS workflow_id")
