"""A step's shard of its only child, so that its ack counts it off without reading its edge.

Revision ID: 0020_workflow_only_shard
Revises: 0019_tasks_by_run
Create Date: 2026-12-06

* ``shardq_workflow_steps.only_shard``: when the step's one child is counted in shard rows (a
  member of a wide fan-in; CockroachDB counts every fan-in from ``FAN_IN_SHARD_FROM`` parents
  this way), the shard of that child it counts in, and ``only_child`` names that child; NULL
  otherwise. The step's ack reads both with the step and lowers that shard row by name
  (``workflow_counts_count_off``), where it read the step's edge row for its shard
  (``workflow_counts_advance``, still used for the steps of earlier workflows and for a step with
  several children). Rows written before this migration stay NULL.

One statement, one schema change: on CockroachDB the connection is in autocommit.
"""

from alembic import op

revision = "0020_workflow_only_shard"
down_revision = "0019_tasks_by_run"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE shardq_workflow_steps ADD COLUMN IF NOT EXISTS only_shard INT4 NULL")


def downgrade() -> None:
    op.execute("ALTER TABLE shardq_workflow_steps DROP COLUMN IF EXISTS only_shard")
