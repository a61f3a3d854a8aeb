"""The JSON API of task browsing, workers and the audit log (every route needs the token; see
:mod:`shardq.web.api` for errors and CSRF).

``GET /api/queues/{queue}/tasks/finished`` (a queue's history, newest first; query ``outcome``,
``since``, ``error``, ``limit``, ``after``: :mod:`shardq.web.finished_list`);
``GET /api/queues/{queue}/tasks/{state}`` (state: ready, scheduled, running, expired, backlog;
query: ``priority``, ``exclusive_key``, ``dedupe_key``, ``min_age`` (``90s``, ``15m``, ``2h``,
``1d``), ``error``, ``order`` (asc, desc), ``limit``, ``after`` (the previous page's ``next``));
``POST /api/queues/{queue}/tasks/{action}`` (action: cancel, run_now, requeue, set_priority; body
``{"ids": [...]}``, plus ``"priority": N`` for set_priority); ``GET /api/tasks/{id}/payload`` (the
payload's bytes, as a download); ``GET /api/queues/{queue}/charts?range=1h|24h|7d`` (activity
per minute or hour, :mod:`shardq.web.charts_view`); ``GET /api/workers``; ``GET /api/audit[?before=CURSOR&limit=N]``.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from shardq.admin import actions as admin
from shardq.errors import InvalidInput
from shardq.web import charts_view, finished_list, registry_views, task_list
from shardq.web.api import call_action, call_view, checked_action, error_json
from shardq.web.context import Failure, run_view
from shardq.web.views import NotFound


async def tasks(request: Request) -> Response:
    if request.path_params["state"] == "finished":
        return await call_view(
            request, finished_list.finished_page, request.path_params["queue"], dict(request.query_params)
        )
    return await call_view(
        request,
        task_list.task_page,
        request.path_params["queue"],
        request.path_params["state"],
        dict(request.query_params),
    )


async def tasks_action(request: Request) -> Response:
    name, action = request.path_params["queue"], request.path_params["action"]

    async def handle(body: dict[str, Any]) -> Response:
        ids = body.get("ids")
        if not isinstance(ids, list):
            raise Failure(400, 'give the tasks as {"ids": [...]}')
        return await call_action(
            request, action.replace("_", " "), f"queue {name}", task_list.act, name, action, ids, body.get("priority")
        )

    return await checked_action(request, handle)


def payload_bytes(store: Any, task_id: str) -> bytes:
    """A live or dead task's whole payload; NotFound when neither table holds it."""
    try:
        task = admin.task_show(store, task_id)
    except InvalidInput:
        task = None
    if task is None:
        raise NotFound(f"no task {task_id!r}")
    return task.payload


async def payload(request: Request) -> Response:
    """The whole payload as ``application/octet-stream``, named ``<id>.bin``."""
    task_id = request.path_params["task_id"]
    try:
        raw = await run_view(request, payload_bytes, task_id)
    except Failure as failure:
        return error_json(failure.status, failure.message)
    safe_name = "".join(c for c in task_id if c.isalnum() or c == "-")[:64] or "payload"
    return Response(
        raw,
        media_type="application/octet-stream",
        headers={
            "Content-Disposition": f'attachment; filename="{safe_name}.bin"',
            "X-Content-Type-Options": "nosniff",
            "Cache-Control": "no-store",
        },
    )


async def charts(request: Request) -> Response:
    return await call_view(
        request, charts_view.queue_charts, request.path_params["queue"], request.query_params.get("range") or "1h"
    )


async def workers(request: Request) -> Response:
    return await call_view(request, registry_views.workers)


async def audit(request: Request) -> Response:
    try:
        limit = int(request.query_params.get("limit", registry_views.AUDIT_LIMIT_DEFAULT))
    except ValueError:
        return error_json(400, "limit must be a whole number")
    return await call_view(
        request, registry_views.audit, before=request.query_params.get("before") or None, limit=limit
    )


def routes() -> list[Route]:
    return [
        Route("/api/queues/{queue}/tasks/{state}", tasks, methods=["GET"]),
        Route("/api/queues/{queue}/tasks/{action}", tasks_action, methods=["POST"]),
        Route("/api/tasks/{task_id}/payload", payload, methods=["GET"]),
        Route("/api/queues/{queue}/charts", charts, methods=["GET"]),
        Route("/api/workers", workers, methods=["GET"]),
        Route("/api/audit", audit, methods=["GET"]),
    ]
