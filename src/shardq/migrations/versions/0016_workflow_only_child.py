"""A step's only child, so that its ack counts it off without reading the edges.

Revision ID: 0016_workflow_only_child
Revises: 0015_workflow_fan_in_shards
Create Date: 2026-11-27

* ``shardq_workflow_steps.only_child``: the step's one child counted in its own row, when it has
  exactly one such child (NULL when it has none or several). A step's ack returns it with the
  step's finish, so a batch of such parents (every member of a group fanning in, every step of a
  chain but the last) is counted off its children by the children's names, grouped, in one
  statement (``workflow_children_count_off``), instead of by a read of each parent's edges
  (``workflow_children_advance``). Rows written before this migration stay NULL and their acks
  read their edges, as before.

One statement, one schema change: on CockroachDB the connection is in autocommit.
"""

from alembic import op

from shardq.migrations import migration_engine

revision = "0016_workflow_only_child"
down_revision = "0015_workflow_fan_in_shards"
branch_labels = None
depends_on = None


def upgrade() -> None:
    text = migration_engine().ddl.text
    op.execute(f"ALTER TABLE shardq_workflow_steps ADD COLUMN IF NOT EXISTS only_child {text} NULL")


def downgrade() -> None:
    op.execute("ALTER TABLE shardq_workflow_steps DROP COLUMN IF EXISTS only_child")
