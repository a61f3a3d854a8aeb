"""Task history: finished tasks and failed attempts, kept per queue for a retention.

Revision ID: 0008_task_history
Revises: 0007_lease_sweeps
Create Date: 2026-11-26

* ``shardq_queues.keep_finished_seconds``: how long the queue keeps its finished tasks (0, the
  default: none are kept, and nothing is written for them; see :mod:`shardq.lifecycle.history`).
* ``shardq_history``: one row per finished task of a queue that keeps them: its outcome
  (``succeeded``, ``dead``, ``cancelled``), task name, enqueue time, attempts, the final attempt's
  run time and error text, and the JSON-encoded result of a task declared with ``result=True``.
  It is written in the same transaction as the ack, dead-letter or cancel that finishes the task.
  ``dedupe_key`` (indexed where set) lets ``dedupe_for`` refuse a key for a while after its task
  finished.
* ``shardq_attempts``: one row per failed attempt (retried) of a task of such a queue; the final
  attempt is the history row itself, so a task that succeeds at once writes one row, not two.
* ``shardq_listeners``: one row per process listening for outcome notifications (PostgreSQL),
  renewed while it listens. Workers send those notifications only while a fresh row exists: a
  NOTIFY serialises the commits that send one, so nobody pays for it while nobody waits
  (:mod:`shardq.lifecycle.waiting`).

Keys. Both tables lead with the task id, a random UUID (v4): inserts land all over the key space,
so on CockroachDB they spread over every range instead of all landing at the end of one
(a time-ordered key). The per-queue time indexes (listing newest first, pruning the oldest) are
hash-sharded on CockroachDB (``USING HASH``) for the same reason. See docs/cockroachdb.md,
"Task history".

Each statement is one schema change: on CockroachDB the connection is in autocommit (see
``migrations/env.py``).
"""

from alembic import op

from shardq.migrations import migration_engine

revision = "0008_task_history"
down_revision = "0007_lease_sweeps"
branch_labels = None
depends_on = None


def upgrade() -> None:
    ddl = migration_engine().ddl
    text = ddl.text
    hashed = " USING HASH" if ddl.hash_sharded else ""
    op.execute("ALTER TABLE shardq_queues ADD COLUMN keep_finished_seconds FLOAT8 NOT NULL DEFAULT 0")
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS shardq_history (
            id UUID PRIMARY KEY,
            queue {text} NOT NULL,
            state {text} NOT NULL,
            task {text},
            created_at TIMESTAMPTZ NOT NULL,
            finished_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            attempts INT4 NOT NULL,
            run_seconds FLOAT8,
            last_error {text},
            result {text},
            dedupe_key {text}
        )
        """
    )
    op.execute(f"CREATE INDEX IF NOT EXISTS shardq_history_by_queue ON shardq_history (queue, finished_at, id){hashed}")
    # dedupe_for: a key's latest finish; only tasks with a dedupe key have an entry.
    op.execute(
        "CREATE INDEX IF NOT EXISTS shardq_history_dedupe ON shardq_history (queue, dedupe_key, finished_at)"
        " WHERE dedupe_key IS NOT NULL"
    )
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS shardq_attempts (
            task_id UUID NOT NULL,
            attempt INT4 NOT NULL,
            queue {text} NOT NULL,
            ended_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            run_seconds FLOAT8,
            error {text},
            PRIMARY KEY (task_id, attempt)
        )
        """
    )
    op.execute(f"CREATE INDEX IF NOT EXISTS shardq_attempts_by_queue ON shardq_attempts (queue, ended_at){hashed}")
    op.execute(
        """
        CREATE TABLE IF NOT EXISTS shardq_listeners (
            id UUID PRIMARY KEY,
            seen_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS shardq_listeners")
    op.execute("DROP TABLE IF EXISTS shardq_attempts")
    op.execute("DROP TABLE IF EXISTS shardq_history")
    op.execute("ALTER TABLE shardq_queues DROP COLUMN IF EXISTS keep_finished_seconds")
