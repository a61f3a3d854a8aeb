"""Plans of the dashboard's charts (sql/common/charts.sql): the hourly sums of the activity
counters, kept for a week, and one queue's activity per minute or per hour."""

from __future__ import annotations

from typing import Any

from shardq.sql.plan import Call, Plan


def stats_hourly_rollup() -> Plan[int]:
    """Sum the current and the previous hour's counters into their hourly rows; returns how many rows."""
    rows = yield Call("stats_hourly_rollup", {})
    return len(rows)


def stats_hourly_prune(keep_seconds: float, limit: int) -> Plan[int]:
    rows = yield Call("stats_hourly_prune", {"keep_seconds": keep_seconds, "limit": limit})
    return len(rows)


def stats_minutes_of_queue(queue: str, minutes: int) -> Plan[list[dict[str, Any]]]:
    rows = yield Call("stats_minutes_of_queue", {"queue": queue, "minutes": minutes})
    return list(rows)


def stats_hours_of_queue(queue: str, hours: int) -> Plan[list[dict[str, Any]]]:
    rows = yield Call("stats_hours_of_queue", {"queue": queue, "hours": hours})
    return list(rows)
