"""Spark ``then=``: a callback task released once every task of a Spark run succeeded.

Revision ID: 0011_spark_then
Revises: 0010_workflows
Create Date: 2026-11-27

* ``shardq_spark_callbacks``: one row per Spark run that declared a callback (``run_id``): the id
  the run's tasks carry in ``shardq_tasks.workflow_id`` (``run_mark``, a UUID version 5 derived
  from the run id), the workflow that holds the callback as its one step (``workflow_id``,
  ``step``) and whether the run is fully enqueued yet (``complete``: every chunk merged). See
  :mod:`shardq.workflows.spark_callbacks`.
* ``shardq_tasks_by_workflow``: the task rows of a workflow, indexed only where
  ``workflow_id`` is set (a partial index, as ``shardq_tasks_dedupe``): the ack of a run's task
  asks whether any other task of the run is left with one probe of it. A task outside every
  workflow and run writes no entry, on CockroachDB too (cockroachdb/cockroach
  docs/RFCS/20200507_partial_indexes.md, Summary: "without overhead for writes that don't match
  the predicate expression"; ``shardq_tasks_dedupe`` of 0001 is such an index already). There,
  the state is in the primary key (0001), so a claim or ack of a marked task also rewrites its
  entry: a cost of tasks of runs with ``then=`` (and workflow steps) only.
* Downgrade drops the index by its bare name, which CockroachDB accepts
  (pkg/sql/parser/sql.y: ``table_index_name: table_name '@' index_name | standalone_index_name``).

Each statement is one schema change: on CockroachDB the connection is in autocommit.
"""

from alembic import op

from shardq.migrations import migration_engine

revision = "0011_spark_then"
down_revision = "0010_workflows"
branch_labels = None
depends_on = None


def upgrade() -> None:
    text = migration_engine().ddl.text
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS shardq_spark_callbacks (
            run_id {text} PRIMARY KEY,
            run_mark UUID NOT NULL,
            workflow_id UUID NOT NULL,
            step {text} NOT NULL,
            complete BOOL NOT NULL DEFAULT false,
            created_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )
        """
    )
    op.execute("CREATE UNIQUE INDEX IF NOT EXISTS shardq_spark_callbacks_mark ON shardq_spark_callbacks (run_mark)")
    op.execute(
        "CREATE INDEX IF NOT EXISTS shardq_tasks_by_workflow ON shardq_tasks (workflow_id)"
        " WHERE workflow_id IS NOT NULL"
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS shardq_tasks_by_workflow")
    op.execute("DROP TABLE IF EXISTS shardq_spark_callbacks")
