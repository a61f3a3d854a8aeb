"""The plan part of ``shardq doctor``: which named statements an engine can send are planned, with
which representative values, and what a plan must not do.

A statement is planned when it is a query or a data change (``SELECT``, ``WITH``, ``INSERT``,
``UPDATE``, ``DELETE``, ``UPSERT``) and needs no per-call table (only the ``{shard_col}`` slot,
filled from the discovered layout). DDL, ``SET``, ``LISTEN``, ``COPY`` and the statements reading
engine internals (CockroachDB's job list, checked separately) are not. Values come from each
parameter's cast in the SQL (``%(ids)s::UUID[]`` gets one UUID) or, uncast, from its name
(:data:`VALUES_BY_NAME`); a parameter neither gives is a defect the test suite catches.

Verdicts, each through the engine's own plan inspection (:mod:`shardq.engine`):
    * ``full scan of <tables>`` — :meth:`~shardq.engine.Engine.explain_tables_read_whole`, except
      for the tables :data:`WHOLE_TABLE_READS` names for the statement, which it reads whole by
      design (the checklist says so and why: :func:`by_design`); when the optimizer had no
      statistics for a table (CockroachDB's "missing stats") the line says so, since a fresh
      cluster's plans may differ from a loaded one's;
    * ``fans out over buckets`` — :meth:`~shardq.engine.Engine.explain_fans_out`, for statements
      that name one bucket (a ``bucket`` parameter);
    * ``SKIP LOCKED without a hard limit`` — :meth:`~shardq.engine.Engine.explain_skip_locked_unbounded`,
      for statements that lock with ``SKIP LOCKED``."""

from __future__ import annotations

import datetime as dt
import re
import uuid
from dataclasses import dataclass
from typing import Any

from shardq.engine.base import Engine
from shardq.models.tasks import MAX_ATTEMPTS_DEFAULT, RANK_BACKLOG, RANK_SCHEDULED
from shardq.sql import Statement

_PLANNED_KEYWORDS = ("SELECT", "WITH", "INSERT", "UPDATE", "DELETE", "UPSERT")


_PARAMETER = re.compile(r"%\((\w+)\)[sb](?:::([A-Za-z0-9_]+)(\[\])?)?")


_NOW = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class WholeTableRead:
    """A statement that reads every row of some tables on purpose, never on a worker's per-task
    path: a full scan of exactly those tables is expected, not a problem (a full scan of any other
    table in its plan still is)."""

    tables: frozenset[str]
    #: why reading every row is fine, for the checklist ("reads every row by design (<reason>)")
    reason: str


def _whole(reason: str, *tables: str) -> WholeTableRead:
    return WholeTableRead(frozenset(tables), reason)


#: Statements that read every row of some tables by design, with the tables and why, for every
#: engine. CockroachDB's EXPLAIN prints ``FULL SCAN`` for any scan no index constrains, so these
#: show there as full scans whatever the data; PostgreSQL's doctor plans with sequential scans off
#: (``doctor_plan_setup``), where most of them become full index scans, which are not flagged.
WHOLE_TABLE_READS: dict[str, WholeTableRead] = {
    # `buckets show`: rows per bucket, every task counted, on an operator's command.
    "task_count_by_bucket": _whole("`buckets show` counts every task", "shardq_tasks"),
    "task_count_by_bucket_current": _whole("`buckets show` counts every task", "shardq_tasks"),
    # shardq_buckets (PostgreSQL) holds one row.
    "buckets_lock_get": _whole("shardq_buckets holds one row", "shardq_buckets"),
    "buckets_update": _whole("shardq_buckets holds one row", "shardq_buckets"),
    "layout_get": _whole("shardq_buckets holds one row", "shardq_buckets"),
    # Periodic pruning and the Spark ledger's housekeeping look for old rows by age in small tables
    # (one row per schedule slot kept, per Spark run, per staging table), at most once a minute.
    "periodic_slots_prune": _whole("housekeeping of one row per schedule slot kept", "shardq_periodic"),
    "spark_runs_expire": _whole("housekeeping of one row per Spark run", "shardq_spark_runs"),
    "spark_stages_stale": _whole("housekeeping of one row per Spark staging table", "shardq_spark_stages"),
    # shardq_listeners holds one row per process waiting for task outcomes (shardq.lifecycle.waiting).
    "outcome_listener_gone": _whole("one row per process waiting for outcomes", "shardq_listeners"),
    "outcome_listeners_present": _whole("one row per process waiting for outcomes", "shardq_listeners"),
    # shardq_workers holds one row per running worker (the dashboard's registry); a task's worker
    # is found by a token among each row's claims, on a page view, not on a worker's path.
    "worker_by_token": _whole("one row per running worker", "shardq_workers"),
    "worker_list": _whole("one row per running worker", "shardq_workers"),
    "worker_prune": _whole("one row per running worker", "shardq_workers"),
    # No WHERE: every queue's settings (`shardq queues`, the dashboard, workers' settings cache).
    "queue_list": _whole("one row per queue", "shardq_queues"),
    # GROUP BY queue over every concurrency slot (`shardq stats`, the dashboard).
    "flow_usage": _whole("one row per concurrency slot", "shardq_slots"),
    # The counters' key is (queue, minute, slot): a window of minutes over every queue, or the
    # minutes past the retention, has no index prefix. Minute rows are pruned to the retention;
    # read once a minute (snapshot, roll-up) or on `shardq stats`.
    "stats_window": _whole("a window of minute counters over every queue", "shardq_stats"),
    "stats_prune": _whole("housekeeping of minute counters, once a minute", "shardq_stats"),
    "stats_hourly_rollup": _whole("the last hour's minute counters, once a minute", "shardq_stats"),
    "stats_hourly_prune": _whole("housekeeping of hourly counters, once a minute", "shardq_stats_hourly"),
}


_BY_TYPE: dict[str, Any] = {
    "UUID": uuid.UUID(int=1),
    "INT": 0,
    "INT2": 0,
    "INT4": 0,
    "INT8": 0,
    "BIGINT": 0,
    "FLOAT8": 1.0,
    "TEXT": "default",
    "STRING": "default",
    "BYTEA": b"x",
    "BYTES": b"x",
    "TIMESTAMPTZ": _NOW,
    "BOOL": False,
}


#: Values of parameters the SQL does not cast, by name.
VALUES_BY_NAME: dict[str, Any] = {
    # the backlog key of a limited key (lifecycle/key_slots.py)
    "waiting": "tenant:42",
    # a key limit (lifecycle/key_limits.py) and a debounced enqueue (lifecycle/debounce.py)
    "pattern": "tenant:*",
    "max_running": 3,
    "key": "report:7",
    "seconds": 5.0,
    "payload": b"{}",
    "after": 0,
    "backlog_rank": RANK_BACKLOG,
    "scheduled_rank": RANK_SCHEDULED,
    "backoff_base": 1.0,
    "backoff_cap": 60.0,
    "bucket": 0,
    "bucket_count": 16,
    "cap": 100,
    "chunk": 0,
    "chunks": 1,
    "merged": 0,
    "exclusive_latest_only": None,
    "id": uuid.UUID(int=1),
    "lease_seconds": 30.0,
    "limit": 100,
    "max_attempts": MAX_ATTEMPTS_DEFAULT,
    "name": "doctor",
    "paused_dequeue": None,
    "paused_enqueue": None,
    "queue": "default",
    "rank_cap": 4,
    "resizing_from": None,
    "retry_jitter": None,
    "run_id": "doctor",
    "scheme": "doctor",
    "slot": 0,
    "stage": "shardq_stage_doctor",
    "states": ["ready"],
    "timeout_clear": False,
}


#: Values for a parameter whose name means something else in one statement.
VALUES_BY_STATEMENT: dict[str, dict[str, Any]] = {
    "periodic_slot_take": {"slot": _NOW},
    "spark_run_mark": {"scheme": 1},
}


def planned(engine: Engine) -> dict[str, Statement]:
    """The engine's named statements ``shardq doctor`` plans (see the module documentation)."""
    chosen = {}
    for name, statement in sorted(engine.statements().items()):
        keyword = _first_keyword(statement.text)
        if (
            keyword in _PLANNED_KEYWORDS
            and statement.slots <= {"shard_col"}
            and name not in engine.statements_needing_internals
            and not name.startswith("doctor_")
        ):
            chosen[name] = statement
    return chosen


def example_values(statement: Statement) -> dict[str, Any]:
    """Representative bound values for every parameter of ``statement``; KeyError names one the
    SQL neither casts nor :data:`VALUES_BY_NAME` knows."""
    found = _PARAMETER.findall(statement.text)
    values: dict[str, Any] = dict(VALUES_BY_STATEMENT.get(statement.name, {}))
    for name, cast, array in found:  # a cast anywhere in the text types the parameter
        if cast.upper() in _BY_TYPE and name not in values:
            values[name] = [_BY_TYPE[cast.upper()]] if array else _BY_TYPE[cast.upper()]
    for name, _, _ in found:
        if name not in values:
            values[name] = VALUES_BY_NAME[name]
    return values


def problems(engine: Engine, name: str, statement: Statement, plan: str, bucket_count: int) -> list[str]:
    """What is wrong with ``plan``, the engine's plan of ``statement`` (empty: nothing)."""
    found = []
    allowed = WHOLE_TABLE_READS[name].tables if name in WHOLE_TABLE_READS else frozenset()
    whole = engine.explain_tables_read_whole(plan) - allowed
    if whole:
        named = sorted(table for table in whole if table)
        found.append(
            "full scan"
            + (f" of {', '.join(named)}" if named else "")
            + (
                "; planned without table statistics (run `ANALYZE <table>` or let the cluster "
                "collect them, then check again)"
                if engine.explain_without_statistics(plan)
                else ""
            )
        )
    if "bucket" in example_values(statement) and engine.explain_fans_out(plan, bucket_count):
        found.append("fans out over buckets")
    if "SKIP LOCKED" in statement.text.upper() and engine.explain_skip_locked_unbounded(plan):
        found.append("SKIP LOCKED without a hard limit")
    return found


def by_design(engine: Engine, name: str, plan: str) -> str | None:
    """The checklist's note for a plan that reads whole tables :data:`WHOLE_TABLE_READS` allows
    it (``"reads every row by design (<reason>)"``), or None when it reads none of them whole."""
    read = WHOLE_TABLE_READS.get(name)
    if read is None or not engine.explain_tables_read_whole(plan) & read.tables:
        return None
    return f"reads every row by design ({read.reason})"


def _first_keyword(text: str) -> str:
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("--"):
            return stripped.split(None, 1)[0].upper().rstrip("(")
    return ""
