"""Limits per key and throttle windows (issue 50: fair shares).

Revision ID: 0022_key_limits
Revises: 0020_workflow_only_shard
Create Date: 2026-12-08

* ``shardq_key_limits``: at most ``max_running`` live tasks of a queue per concurrency key, for
  a key (``pattern`` = the key) or a prefix (``pattern`` = ``prefix*``). A few rows per queue,
  written by ``shardq queue key-limit``; read in the transaction of an enqueue or a release of a
  limited key (shardq.lifecycle.key_limits). A key's live tasks hold *key slots*, which are
  exclusive keys (``key`` + chr(31) + slot number), so the unique index over active exclusive
  keys of migration 0001 makes the limit exact: no new column on ``shardq_tasks``.
* ``shardq_throttle_windows``: per (queue, throttle key) the end of the window its first task
  opened (``enqueue(..., throttle=seconds)``); an enqueue inside the window is dropped. One row
  per key ever throttled; an expired row is reused by the next enqueue of its key.

One statement, one schema change each: on CockroachDB the connection is in autocommit.
"""

from alembic import op

from shardq.migrations import migration_engine

revision = "0022_key_limits"
down_revision = "0021_durable_steps"
branch_labels = None
depends_on = None


def upgrade() -> None:
    text = migration_engine().ddl.text
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS shardq_key_limits (
            queue {text} NOT NULL,
            pattern {text} NOT NULL,
            max_running INT4 NOT NULL,
            PRIMARY KEY (queue, pattern)
        )
        """
    )
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS shardq_throttle_windows (
            queue {text} NOT NULL,
            key {text} NOT NULL,
            until TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (queue, key)
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS shardq_throttle_windows")
    op.execute("DROP TABLE IF EXISTS shardq_key_limits")
