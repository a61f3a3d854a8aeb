"""A step's result kept with its workflow, for its children, when its queue keeps no finished tasks.

Revision ID: 0018_workflow_step_results
Revises: 0017_workflow_sole_child
Create Date: 2026-11-27

* ``shardq_workflow_steps.result``: the JSON text of the return value of a step with children
  whose task is declared ``result=True``, written by the ack that deleted its task when its queue
  keeps no finished tasks (where it keeps them, the history row holds the result, as before).
  A child that takes ``results`` reads the history's result, else this one
  (``workflow_parent_results``). Deleted with the workflow's steps when it is pruned. Rows
  written before this migration stay NULL.

One statement, one schema change: on CockroachDB the connection is in autocommit.
"""

from alembic import op

from shardq.migrations import migration_engine

revision = "0018_workflow_step_results"
down_revision = "0017_workflow_sole_child"
branch_labels = None
depends_on = None


def upgrade() -> None:
    text = migration_engine().ddl.text
    op.execute(f"ALTER TABLE shardq_workflow_steps ADD COLUMN IF NOT EXISTS result {text} NULL")


def downgrade() -> None:
    op.execute("ALTER TABLE shardq_workflow_steps DROP COLUMN IF EXISTS result")
