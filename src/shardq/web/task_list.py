"""What the dashboard's task list shows and does, as plain data (the views of
``/queues/{queue}/tasks`` and ``/api/queues/{queue}/tasks``): one page of a queue's live tasks by
state through :func:`shardq.admin.browse.browse`, and the bulk actions on the tasks chosen.

Guarantees:

* Query values arrive as text and are parsed here; bad ones raise
  :class:`~shardq.errors.InvalidInput` (a 400) before anything is read or changed. An unknown
  queue is :class:`~shardq.web.views.NotFound`.
* Reads are bounded as :mod:`shardq.admin.browse` says (one page: at most a fixed number of index
  entries per bucket, keyset cursor); actions take at most
  :data:`shardq.admin.browse.ACTION_IDS_MAX` ids and touch only tasks of the queue named.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Mapping
from typing import Any

from shardq.admin import actions as admin
from shardq.admin import browse
from shardq.errors import InvalidInput
from shardq.operations import browse as browse_operations
from shardq.sessions.store import TaskStore
from shardq.web.views import known_queue

#: Bulk actions by name: what each does to the tasks chosen.
ACTIONS = {
    "cancel": "cancel (remove from the queue)",
    "run_now": "run now / retry now (scheduled tasks)",
    "requeue": "requeue now (expired leases)",
    "set_priority": "set priority (ready, scheduled, backlog)",
}
#: Which actions a state's list offers.
ACTIONS_BY_STATE = {
    "ready": ("cancel", "set_priority"),
    "scheduled": ("run_now", "set_priority", "cancel"),
    "running": ("cancel",),
    "expired": ("requeue", "cancel"),
    "backlog": ("set_priority", "cancel"),
}
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_age(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``2h``, ``1d`` -> seconds; InvalidInput otherwise."""
    match = _AGE.match(text)
    if not match:
        raise InvalidInput(f"age must be a number with an optional unit s, m, h or d, not {text!r}")
    return float(match.group(1)) * _UNIT[match.group(2)]


def parse_filters(query: Mapping[str, str]) -> browse.Filters:
    """The filters of a list's query string (empty values are no condition)."""

    def given(name: str) -> str | None:
        value = query.get(name, "").strip()
        return value or None

    priority = given("priority")
    age = given("min_age")
    try:
        number = int(priority) if priority is not None else None
    except ValueError:
        raise InvalidInput("priority must be a whole number") from None
    return browse.Filters(
        priority=number,
        exclusive_key=given("exclusive_key"),
        dedupe_key=given("dedupe_key"),
        min_age_s=parse_age(age) if age else None,
        error_text=given("error"),
    ).validate()


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def task_page(store: TaskStore, queue: str, state: str, query: Mapping[str, str]) -> dict[str, Any]:
    """One page of ``queue``'s tasks in ``state``, as :func:`shardq.admin.browse.browse` reads it, with
    the filters, order, cursor and limit of ``query``."""
    settings = known_queue(store, queue)
    try:
        limit = int(query.get("limit") or browse.LIMIT_DEFAULT)
    except ValueError:
        raise InvalidInput("limit must be a whole number") from None
    filters = parse_filters(query)
    page = browse.browse(
        store,
        queue,
        state,
        filters=filters,
        order=query.get("order") or "asc",
        after=query.get("after") or None,
        limit=limit,
    )
    return {
        "queue": queue,
        "state": state,
        "order": page.order,
        "limit": page.limit,
        "after": query.get("after") or None,
        "next": page.next,
        "scanned": page.scanned,
        "capped": page.capped,
        "cap": browse.LEASED_CAP,
        "filters": {
            name: query.get(name, "") for name in ("priority", "exclusive_key", "dedupe_key", "min_age", "error")
        },
        "actions": list(ACTIONS_BY_STATE[state]),
        "keeps_finished": settings.keep_finished_seconds > 0,
        "tasks": [
            {
                "id": t.id,
                "state": t.state,
                "priority": t.priority,
                "attempts": t.attempts,
                "max_attempts": t.max_attempts,
                "run_at": _iso(t.run_at),
                "created_at": _iso(t.created_at),
                "lease_expires_at": _iso(t.lease_expires_at),
                "exclusive_key": t.exclusive_key,
                "dedupe_key": t.dedupe_key,
                "last_error": t.last_error,
                "payload_bytes": t.payload_bytes,
            }
            for t in page.tasks
        ],
    }


def _in_queue(store: TaskStore, queue: str, ids: list[uuid.UUID]) -> list[str]:
    rows = store.run(browse_operations.task_browse_rows(ids))
    return [str(i) for i in ids if i in rows and rows[i]["queue"] == queue]


def act(store: TaskStore, queue: str, action: str, ids: list[Any], priority: Any = None) -> dict[str, Any]:
    """Apply ``action`` (a key of :data:`ACTIONS`) to the tasks ``ids`` of ``queue``; returns the
    ids changed and those left alone (gone, in another queue, or in a state the action does not
    apply to)."""
    known_queue(store, queue)
    if action not in ACTIONS:
        raise InvalidInput(f"action must be one of {', '.join(ACTIONS)}")
    wanted = browse.parse_ids(ids)
    if action == "cancel":
        mine = _in_queue(store, queue, wanted)
        changed = set(store.run(admin.cancel_plan(admin.parse_cancel_ids(mine))).cancelled) if mine else set()
        result = browse.ActionResult(
            tuple(str(i) for i in wanted if str(i) in changed), tuple(str(i) for i in wanted if str(i) not in changed)
        )
    elif action == "run_now":
        result = browse.run_now(store, queue, [str(i) for i in wanted])
    elif action == "requeue":
        result = browse.requeue_expired(store, queue, [str(i) for i in wanted])
    else:
        if isinstance(priority, str):
            try:
                priority = int(priority.strip())
            except ValueError:
                raise InvalidInput("priority must be a whole number") from None
        result = browse.set_priority(store, queue, [str(i) for i in wanted], priority)
    return {"action": action, "changed": list(result.changed), "unchanged": list(result.unchanged)}
