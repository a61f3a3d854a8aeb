"""PostgreSQL: only a Spark run's tasks are indexed by their mark, not every workflow step.

Revision ID: 0019_tasks_by_run
Revises: 0018_workflow_step_results
Create Date: 2026-11-27

* ``shardq_tasks_by_run`` replaces ``shardq_tasks_by_workflow`` (0011) on PostgreSQL. 0011 indexed
  every row with a ``workflow_id``: a Spark run's tasks, which carry the run's mark there (a UUID
  version 5, :func:`shardq.workflows.spark_callbacks.mark_of`), and every workflow step, which carries its
  workflow's id (version 4). Only the marks are ever looked up (``spark_callback_due``: is any task
  of the run left), yet each step wrote an entry when it was enqueued and again when it was
  released (a release moves the row's ``rank``, a key column: not a HOT update). The predicate
  now names the version digit of the UUID's text (``xxxxxxxx-xxxx-Vxxx-…``, the 15th character),
  the test :func:`shardq.workflows.spark_callbacks.is_run` makes in Python; ``spark_callback_due`` repeats it
  word for word so the planner proves the index usable. Measured in docs/workflows.md ("Costs").
* CockroachDB keeps 0011's index: nothing runs there (``Ddl.expression_predicates``). Its
  predicate would need a cast and a function in a partial index predicate, matched by the
  optimizer's implication of the anti-join's lookup; kept as it is until that is checked on a
  cluster.
* Building the index reads the tasks table once, under a lock that holds back writes to it (not
  ``CONCURRENTLY``: the migration runs in a transaction); it indexes only the tasks of Spark runs.
"""

from alembic import op

from shardq.migrations import migration_engine

revision = "0019_tasks_by_run"
down_revision = "0018_workflow_step_results"
branch_labels = None
depends_on = None

RUN_MARK = "substr(workflow_id::text, 15, 1) = '5'"


def upgrade() -> None:
    if not migration_engine().ddl.expression_predicates:
        return
    op.execute(f"CREATE INDEX IF NOT EXISTS shardq_tasks_by_run ON shardq_tasks (workflow_id) WHERE {RUN_MARK}")
    op.execute("DROP INDEX IF EXISTS shardq_tasks_by_workflow")


def downgrade() -> None:
    if not migration_engine().ddl.expression_predicates:
        return
    op.execute(
        "CREATE INDEX IF NOT EXISTS shardq_tasks_by_workflow ON shardq_tasks (workflow_id)"
        " WHERE workflow_id IS NOT NULL"
    )
    op.execute("DROP INDEX IF EXISTS shardq_tasks_by_run")
