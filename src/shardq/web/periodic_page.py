"""The Periodic page (``/periodic``) and ``GET /api/periodic``: the schedules of the app given to
``shardq web --app MODULE:APP``, each with its task, queue, when it runs, the last slot taken (from
``shardq_periodic``, one grouped read of the schedules named) and the next one, as
``shardq periodic list`` shows them (:func:`shardq.maintenance.periodic.describe`).

Does not: find schedules by itself. They are declared in the application's code, not stored;
without ``--app`` the page says how to give it.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from shardq.maintenance import periodic
from shardq.sessions.store import TaskStore
from shardq.web.api import call_view
from shardq.web.context import Dashboard, Failure, run_view
from shardq.web.pages import error_page, render


def schedules_view(store: TaskStore, schedules: list[Any] | None) -> dict[str, Any]:
    """The schedules with their last and next slot; ``app_given`` False when the dashboard has no app."""
    if schedules is None:
        return {"app_given": False, "schedules": []}
    return {"app_given": True, "schedules": [v.as_json() for v in periodic.describe(store, schedules)]}


async def page(request: Request) -> Response:
    try:
        data = await run_view(request, schedules_view, Dashboard.of(request).schedules)
    except Failure as failure:
        return error_page(request, failure.status, failure.message)
    return render(request, "periodic.html", data=data)


async def api(request: Request) -> Response:
    return await call_view(request, schedules_view, Dashboard.of(request).schedules)


def routes() -> list[Route]:
    return [Route("/periodic", page, methods=["GET"]), Route("/api/periodic", api, methods=["GET"])]
