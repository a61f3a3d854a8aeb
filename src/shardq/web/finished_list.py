"""What the dashboard's finished tab shows, as plain data (the views of
``/queues/{queue}/tasks?state=finished`` and ``/api/queues/{queue}/tasks/finished``): one page of
a queue's finished tasks (succeeded, dead, cancelled) from its history, through
:func:`shardq.lifecycle.history.finished_page`.

Query values: ``outcome`` (succeeded, dead or cancelled; the tab itself is the ``state``),
``since`` (an age such as ``90s``, ``15m``, ``2h``, ``7d``: finished within it; or an ISO time
with its zone), ``error`` (text in the last error), ``limit``, ``after`` (the previous page's
``next``).

Guarantees:

* Bad values raise :class:`~shardq.errors.InvalidInput` (a 400) before anything is read; an
  unknown queue is :class:`~shardq.web.views.NotFound`.
* A page reads at most a fixed number of history rows (see :func:`shardq.lifecycle.history.finished_page`).

Does not: show results (a task's page does), nor anything of a queue that keeps no finished
tasks (``keeps_finished`` is then false and the page says how to turn keeping on).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from shardq.errors import InvalidInput
from shardq.lifecycle import history
from shardq.sessions.store import TaskStore
from shardq.web.task_list import parse_age
from shardq.web.views import known_queue

FILTERS = ("outcome", "since", "error")


def parse_since(text: str, now: dt.datetime) -> dt.datetime:
    """An age (``2h``: the last two hours) or an ISO time with its zone; InvalidInput otherwise."""
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        return now - dt.timedelta(seconds=parse_age(text))
    if moment.tzinfo is None:
        raise InvalidInput("since: give the time with its zone (e.g. 2026-11-26T10:00:00+00:00), or an age like 2h")
    return moment


def finished_page(store: TaskStore, queue: str, query: Mapping[str, str]) -> dict[str, Any]:
    """One page of ``queue``'s finished tasks with the filters, cursor and limit of ``query``."""
    settings = known_queue(store, queue)

    def given(name: str) -> str | None:
        value = query.get(name, "").strip()
        return value or None

    try:
        limit = int(query.get("limit") or history.PAGE_DEFAULT)
    except ValueError:
        raise InvalidInput("limit must be a whole number") from None
    since_text = given("since")
    since = parse_since(since_text, dt.datetime.now(dt.UTC)) if since_text else None
    page = history.finished_page(
        store, queue, state=given("outcome"), since=since, error_text=given("error"), after=given("after"), limit=limit
    )
    return {
        "queue": queue,
        "state": "finished",
        "keeps_finished": settings.keep_finished_seconds > 0,
        "keep_finished_seconds": settings.keep_finished_seconds,
        "limit": limit,
        "after": given("after"),
        "next": page.next,
        "scanned": page.scanned,
        "filters": {name: query.get(name, "") for name in FILTERS},
        "tasks": [
            {
                "id": t.id,
                "state": t.state,
                "task": t.task,
                "attempts": t.attempts,
                "created_at": t.created_at.isoformat(),
                "finished_at": t.finished_at.isoformat(),
                "run_seconds": t.run_seconds,
                "last_error": t.last_error,
            }
            for t in page.tasks
        ],
    }
