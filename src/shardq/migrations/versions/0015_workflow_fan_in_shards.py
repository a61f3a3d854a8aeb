"""Fan-ins without one hot counter row: a wide fan-in's count split over shard rows.

Revision ID: 0015_workflow_fan_in_shards
Revises: 0014_workflows_pruning
Create Date: 2026-11-27

* ``shardq_workflow_counts``: for a step whose parents are counted in shards (a fan-in wider
  than the engine's threshold, :meth:`shardq.engine.Engine.fan_in_shards`), one row per shard,
  keyed (workflow_id, step, shard): the parents of that shard not yet succeeded. A parent's ack
  lowers only its own shard's row; the ack that brings a shard to 0 lowers the step's
  ``waiting_on``, which for such a step counts its shards not yet drained (docs/workflows.md,
  "Fan-in in shards").
* ``shardq_workflow_edges.shard``: the shard of the child's count the parent belongs to, NULL
  when the child counts its parents in its own row (every edge written before this migration).
* ``shardq_workflow_steps.child_kinds``: which kinds of children a step has, so that its ack sends
  only the statements it needs: bit 1, children counted in their own row; bit 2, children counted
  in shards; 0, none. Rows written before this migration get 1 (what every ack did until now).

Each statement is one schema change: on CockroachDB the connection is in autocommit.
"""

from alembic import op

from shardq.migrations import migration_engine

revision = "0015_workflow_fan_in_shards"
down_revision = "0014_workflows_pruning"
branch_labels = None
depends_on = None


def upgrade() -> None:
    text = migration_engine().ddl.text
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS shardq_workflow_counts (
            workflow_id UUID NOT NULL,
            step {text} NOT NULL,
            shard INT4 NOT NULL,
            waiting_on INT4 NOT NULL,
            PRIMARY KEY (workflow_id, step, shard)
        )
        """
    )
    op.execute("ALTER TABLE shardq_workflow_edges ADD COLUMN IF NOT EXISTS shard INT4 NULL")
    op.execute("ALTER TABLE shardq_workflow_steps ADD COLUMN IF NOT EXISTS child_kinds INT2 NOT NULL DEFAULT 1")


def downgrade() -> None:
    op.execute("ALTER TABLE shardq_workflow_steps DROP COLUMN IF EXISTS child_kinds")
    op.execute("ALTER TABLE shardq_workflow_edges DROP COLUMN IF EXISTS shard")
    op.execute("DROP TABLE IF EXISTS shardq_workflow_counts")
