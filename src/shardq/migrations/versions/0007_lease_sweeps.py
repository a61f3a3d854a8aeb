"""Lease sweeping by the workers themselves: one turn per bucket.

Revision ID: 0007_lease_sweeps
Revises: 0006_flow_control
Create Date: 2026-11-26

* ``shardq_sweeps``: one row per bucket, the time its expired leases were last swept. Every worker
  sweeps expired leases itself (no reaper process needed); before it sweeps a bucket it takes that
  bucket's turn, which only succeeds once ``swept_at`` is at least the sweep interval old. So each
  bucket is swept about once per interval however many workers run, and the fleet's sweeping cost
  does not grow with the fleet. Rows appear on first use (``INSERT … ON CONFLICT``); a bucket that a
  resize removed leaves a harmless row behind.

Each statement is one schema change: on CockroachDB the connection is in autocommit (see
``migrations/env.py``).
"""

from alembic import op

revision = "0007_lease_sweeps"
down_revision = "0006_flow_control"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE IF NOT EXISTS shardq_sweeps (
            bucket INT4 PRIMARY KEY,
            swept_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS shardq_sweeps")
