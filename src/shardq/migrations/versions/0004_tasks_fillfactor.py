"""Room on every tasks page for the row versions claims write (PostgreSQL): fillfactor 80 -> 60.

Revision ID: 0004_tasks_fillfactor
Revises: 0003_stats
Create Date: 2026-11-23

A claim updates its rows in place; the update is HOT (no index entry written) only while the
row's page has room for the new version. With fillfactor 80, a queue that is enqueued into and
drained at the same time (the normal case) wrote 23-32 % of its claims as non-HOT updates: a new
entry in the primary key and in the id index each, and more for vacuum later. Measured in the
load test's depth cell (10k ready tasks, 4 workers, tasks arriving as fast as they finish):

| fillfactor | claims HOT | claim execution per task |
|---|---|---|
| 80 | 68-77 % | 24.6 µs |
| 60 | 96 % | 16.9 µs |
| 50 | 99 % | 17.1 µs |

60 takes nearly all the gain for a quarter more pages than 80 (50 would take 60 % more). The
setting applies to pages filled from now on; pages already full keep their rows until those are
deleted. CockroachDB has no fillfactor: nothing there.
"""

from alembic import op

from shardq.migrations import migration_engine

revision = "0004_tasks_fillfactor"
down_revision = "0003_stats"
branch_labels = None
depends_on = None

TASKS_FILLFACTOR = 60
PREVIOUS_FILLFACTOR = 80


def upgrade() -> None:
    if migration_engine().ddl.fillfactor:
        op.execute(f"ALTER TABLE shardq_tasks SET (fillfactor = {TASKS_FILLFACTOR})")


def downgrade() -> None:
    if migration_engine().ddl.fillfactor:
        op.execute(f"ALTER TABLE shardq_tasks SET (fillfactor = {PREVIOUS_FILLFACTOR})")
