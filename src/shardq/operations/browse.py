"""Plans of the dashboard's task browsing (:mod:`shardq.admin.browse`): the bounded scans of one page,
the rows a page shows, and the actions on tasks named by id. Both engines name these statements
alike; each engine's ``browse.sql`` reads its own key (sql/postgresql, sql/cockroachdb)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from shardq.sql.plan import Call, Plan


def task_browse_span(params: Mapping[str, Any], *, descending: bool) -> Plan[list[dict[str, Any]]]:
    """One page's scan of one state's span in every bucket: (bucket, rank, exec_time, id, hit)
    rows, at most ``params["scan"]`` per bucket (see sql/*/browse.sql)."""
    if descending:
        rows = yield Call("task_browse_span_desc", params)
    else:
        rows = yield Call("task_browse_span", params)
    return list(rows)


def task_browse_leased(params: Mapping[str, Any]) -> Plan[list[dict[str, Any]]]:
    """A queue's leased tasks (or only the expired ones), at most ``params["cap"]``: (bucket,
    rank, exec_time, id, hit) rows in no particular order."""
    rows = yield Call("task_browse_leased", params)
    return list(rows)


def task_browse_rows(ids: Sequence[uuid.UUID]) -> Plan[dict[uuid.UUID, dict[str, Any]]]:
    """The listed fields of the tasks ``ids`` still in the tasks table, by id."""
    rows = yield Call("task_browse_rows", {"ids": list(ids)})
    return {row["id"]: row for row in rows}


def task_run_now_many(queue: str, ids: Sequence[uuid.UUID]) -> Plan[set[uuid.UUID]]:
    """Make the scheduled ones of ``ids`` ready now; returns the ids changed."""
    rows = yield Call("task_run_now_many", {"queue": queue, "ids": list(ids)})
    return {row["id"] for row in rows}


def task_priority_set_many(queue: str, ids: Sequence[uuid.UUID], priority: int) -> Plan[set[uuid.UUID]]:
    """Give the ready, scheduled and backlogged ones of ``ids`` ``priority``; returns the ids changed."""
    rows = yield Call("task_priority_set_many", {"queue": queue, "ids": list(ids), "priority": priority})
    return {row["id"] for row in rows}
