"""Pruning finished workflows: an index to walk workflows by age.

Revision ID: 0014_workflows_pruning
Revises: 0013_queue_keep_results
Create Date: 2026-11-27

* ``shardq_workflows_created`` on ``shardq_workflows (created_at, id)``: the reaper's workflow
  prune (:func:`shardq.maintenance.pruning.prune_workflows`) walks the workflows older than the
  retention in that order, a page at a time, without reading the younger ones. Workflows are
  written by applications, so on CockroachDB the time index is hash-sharded (``USING HASH``):
  a plain one would send every new workflow to the end of one range (see migration 0008).

* Downgrade drops the index by its bare name, which CockroachDB accepts (pkg/sql/parser/sql.y:
  ``table_index_name: table_name '@' index_name | standalone_index_name``).

One statement, one schema change: on CockroachDB the connection is in autocommit.
"""

from alembic import op

from shardq.migrations import migration_engine

revision = "0014_workflows_pruning"
down_revision = "0013_queue_keep_results"
branch_labels = None
depends_on = None


def upgrade() -> None:
    hashed = " USING HASH" if migration_engine().ddl.hash_sharded else ""
    op.execute(f"CREATE INDEX IF NOT EXISTS shardq_workflows_created ON shardq_workflows (created_at, id){hashed}")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS shardq_workflows_created")
