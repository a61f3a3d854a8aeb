"""A step's sole child's task, so that its ack makes that task claimable without counting it off.

Revision ID: 0017_workflow_sole_child
Revises: 0016_workflow_only_child
Create Date: 2026-11-27

* ``shardq_workflow_steps.sole_child_task_id``: when the step's only child has no other parent
  and is not an on-failure step (every step of a chain but the last), that child's task id;
  NULL otherwise. The step's ack reads it with the step and makes that task claimable directly
  (``workflow_tasks_release``): no count to lower, the child's row not written. The child's row
  stays ``waiting``, and every statement that reads a step's state reads such a step by its task
  row (docs/workflows.md, "The model"). Rows written before this migration stay NULL and their
  acks count their only child off its row, as before.

Upgrading: a worker of a version before this migration finds no step of a task its ack deleted
when that step was released directly (it reads ``ready`` steps only), and so releases none of
that step's children. Stop the workers of earlier versions before workflows enqueued by this one
run (docs/workflows.md, "Does not").

One statement, one schema change: on CockroachDB the connection is in autocommit.
"""

from alembic import op

revision = "0017_workflow_sole_child"
down_revision = "0016_workflow_only_child"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE shardq_workflow_steps ADD COLUMN IF NOT EXISTS sole_child_task_id UUID NULL")


def downgrade() -> None:
    op.execute("ALTER TABLE shardq_workflow_steps DROP COLUMN IF EXISTS sole_child_task_id")
