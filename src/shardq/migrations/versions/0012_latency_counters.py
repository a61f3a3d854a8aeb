"""Latency counters: what the dashboard's lead-time and start-latency charts are drawn from.

Revision ID: 0012_latency_counters
Revises: 0011_spark_then
Create Date: 2026-11-27

Four columns on the per-minute activity counters (``shardq_stats``) and on their hourly sums
(``shardq_stats_hourly``), added by each worker's stats flush like the others (no statement per
task):

* ``first_starts`` and ``start_wait_seconds``: first attempts started, and the seconds they waited
  from when they were due (their enqueue time, unless enqueued with a delay) to their handler's
  start, summed: their quotient is the mean enqueue-to-start latency.
* ``lead_acks`` and ``lead_seconds``: tasks acked, and the seconds from their enqueue to their
  ack, summed: the mean lead time.

Every column defaults to 0, so rows written before, and by writers that do not know the columns,
read as "nothing measured". Each statement is one schema change: on CockroachDB the connection is
in autocommit (see ``migrations/env.py``).
"""

from alembic import op

revision = "0012_latency_counters"
down_revision = "0011_spark_then"
branch_labels = None
depends_on = None

COLUMNS = (
    ("first_starts", "INT8"),
    ("start_wait_seconds", "FLOAT8"),
    ("lead_acks", "INT8"),
    ("lead_seconds", "FLOAT8"),
)


def upgrade() -> None:
    for table in ("shardq_stats", "shardq_stats_hourly"):
        for name, kind in COLUMNS:
            op.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {name} {kind} NOT NULL DEFAULT 0")


def downgrade() -> None:
    for table in ("shardq_stats_hourly", "shardq_stats"):
        for name, _kind in COLUMNS:
            op.execute(f"ALTER TABLE {table} DROP COLUMN IF EXISTS {name}")
