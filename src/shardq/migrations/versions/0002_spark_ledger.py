"""Ledger tables of the Spark bulk enqueue (shardq.spark): runs, merged chunks, staging tables.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23

* ``shardq_spark_runs``: one row per logical Spark job (``run_id``), pinning the queue and the
  number of chunks its rows are hashed into, so every re-run splits the input the same way.
* ``shardq_spark_chunks``: one row per chunk that has been merged into ``shardq_tasks``. The row
  commits in the same transaction as the chunk's tasks, so a chunk is merged at most once, even
  after its tasks were acked and deleted (the tasks table forgets them; this table does not).
* ``shardq_spark_stages``: the staging tables attempts have created and not yet dropped, with their
  creation time, so that a crashed attempt's table can be found and dropped later
  (``shardq spark-gc``). A row is written *before* its table is created.

The staging tables themselves are created and dropped at run time by :mod:`shardq.spark` (their
names are per attempt); Spark never creates or alters any table. The DDL is the same on both
databases.
"""

import re

import sqlalchemy as sa
from alembic import op

from shardq.migrations import migration_engine

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _text() -> str:
    return migration_engine().ddl.text


def upgrade() -> None:
    text = _text()
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS shardq_spark_runs (
            run_id {text} PRIMARY KEY,
            queue {text} NOT NULL,
            chunks INT4 NOT NULL CHECK (chunks > 0),
            created_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )
        """
    )
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS shardq_spark_chunks (
            run_id {text} NOT NULL,
            chunk INT4 NOT NULL,
            rows_merged INT8 NOT NULL,
            merged_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            PRIMARY KEY (run_id, chunk)
        )
        """
    )
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS shardq_spark_stages (
            stage {text} PRIMARY KEY,
            run_id {text} NOT NULL,
            created_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )
        """
    )


_STAGE_NAME = re.compile(r"^shardq_stage_[0-9a-f_]+$")


def downgrade() -> None:
    bind = op.get_bind()
    present = bind.execute(
        sa.text("SELECT 1 FROM information_schema.tables WHERE table_name = 'shardq_spark_stages'")
    ).first()
    if present:
        # Staging tables left by crashed attempts would be orphaned without their ledger rows.
        for (stage,) in bind.execute(sa.text("SELECT stage FROM shardq_spark_stages")).fetchall():
            if _STAGE_NAME.match(stage):  # only names shardq.spark generated
                op.execute(f'DROP TABLE IF EXISTS "{stage}"')
    for table in ("shardq_spark_stages", "shardq_spark_chunks", "shardq_spark_runs"):
        op.execute(f"DROP TABLE IF EXISTS {table}")
