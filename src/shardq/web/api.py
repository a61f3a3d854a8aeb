"""The JSON API behind the pages (every route needs the token, see :mod:`shardq.web.auth`).

``GET /api/queues``, ``/api/queues/{queue}``, ``/api/queues/{queue}/dead[?limit=N&after=CURSOR]``
(keyset pages: ``after`` is the previous page's ``next``),
``/api/tasks/{id}``; ``POST /api/queues/{queue}/pause`` and ``/resume`` (optional body
``{"enqueue": bool, "dequeue": bool}``, both by default), ``/api/queues/{queue}/dead/requeue``
(body ``{"ids": [...]}`` or ``{"all": true}``), ``/api/queues/{queue}/dead/purge``,
``/api/tasks/{id}/cancel``.

Errors are ``{"error": "..."}``: 401 without the token, 403 for a cookie request without its CSRF
token (``X-CSRF-Token``), 404 for an unknown queue or task, 400 for a malformed body or bad
input, 405 for a GET on an action, 503 when the database fails. A refused request changes
nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from shardq.web import views
from shardq.web.context import Dashboard, Failure, read_body, run_action, run_view

JSON_BODY_MAX = 1024 * 1024


def error_json(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers={"Cache-Control": "no-store"})


async def call_view(request: Request, view: Callable[..., Any], *args: Any, **kwargs: Any) -> Response:
    try:
        result = await run_view(request, view, *args, **kwargs)
    except Failure as failure:
        return error_json(failure.status, failure.message)
    return JSONResponse(result, headers={"Cache-Control": "no-store"})


async def call_action(
    request: Request, action: str, target: str, view: Callable[..., Any], *args: Any, **kwargs: Any
) -> Response:
    """:func:`call_view` for an action: recorded in the audit log once it succeeded."""
    try:
        result = await run_action(request, action, target, view, *args, **kwargs)
    except Failure as failure:
        return error_json(failure.status, failure.message)
    return JSONResponse(result, headers={"Cache-Control": "no-store"})


async def _body(request: Request) -> dict[str, Any]:
    """The request's JSON object (an empty body is ``{}``); :class:`Failure` 400 otherwise."""
    raw = await read_body(request, JSON_BODY_MAX)
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise Failure(400, "the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise Failure(400, "the body must be a JSON object")
    return body


def _flag(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name, default)
    if not isinstance(value, bool):
        raise Failure(400, f"{name!r} must be true or false")
    return value


async def checked_action(request: Request, handle: Callable[[dict[str, Any]], Any]) -> Response:
    """CSRF check (cookie requests), body parsing, then the view."""
    dashboard = Dashboard.of(request)
    if not dashboard.csrf_ok(request, request.headers.get("x-csrf-token")):
        return error_json(403, "missing or wrong CSRF token (X-CSRF-Token header)")
    try:
        body = await _body(request)
        return await handle(body)
    except Failure as failure:
        return error_json(failure.status, failure.message)


async def queues(request: Request) -> Response:
    return await call_view(request, views.overview, Dashboard.of(request).stats_options)


async def queue(request: Request) -> Response:
    return await call_view(
        request, views.queue_detail, request.path_params["queue"], Dashboard.of(request).stats_options
    )


async def dead(request: Request) -> Response:
    try:
        limit = int(request.query_params.get("limit", views.DEAD_LIMIT_DEFAULT))
    except ValueError:
        return error_json(400, "limit must be a whole number")
    return await call_view(
        request,
        views.dead_detail,
        request.path_params["queue"],
        limit=limit,
        after=request.query_params.get("after") or None,
    )


async def task(request: Request) -> Response:
    return await call_view(request, views.task_detail, request.path_params["task_id"])


async def task_status(request: Request) -> Response:
    return await call_view(request, views.task_status, request.path_params["task_id"])


async def workflow_status(request: Request) -> Response:
    return await call_view(request, views.workflow_status, request.path_params["workflow_id"])


def _pause_route(paused: bool) -> Callable[[Request], Any]:
    async def endpoint(request: Request) -> Response:
        async def handle(body: dict[str, Any]) -> Response:
            enqueue, dequeue = _flag(body, "enqueue", True), _flag(body, "dequeue", True)
            name = request.path_params["queue"]
            return await call_action(
                request,
                "pause" if paused else "resume",
                f"queue {name}",
                views.set_paused,
                name,
                paused,
                enqueue=enqueue,
                dequeue=dequeue,
            )

        return await checked_action(request, handle)

    return endpoint


async def dead_requeue(request: Request) -> Response:
    async def handle(body: dict[str, Any]) -> Response:
        ids, every = body.get("ids"), body.get("all", False)
        if every is not True and every is not False:
            raise Failure(400, "'all' must be true or false")
        if ids is not None and (not isinstance(ids, list) or not all(isinstance(i, str) for i in ids)):
            raise Failure(400, "'ids' must be a list of task id strings")
        if every == bool(ids):
            raise Failure(400, 'give either {"ids": [...]} (not empty) or {"all": true}')
        name = request.path_params["queue"]
        return await call_action(
            request, "requeue dead", f"queue {name}", views.dead_requeue, name, ids, all_tasks=every
        )

    return await checked_action(request, handle)


async def dead_purge(request: Request) -> Response:
    async def handle(body: dict[str, Any]) -> Response:
        name = request.path_params["queue"]
        return await call_action(request, "purge dead", f"queue {name}", views.dead_purge, name)

    return await checked_action(request, handle)


async def cancel(request: Request) -> Response:
    async def handle(body: dict[str, Any]) -> Response:
        task_id = request.path_params["task_id"]
        return await call_action(request, "cancel", f"task {task_id}", views.cancel, task_id)

    return await checked_action(request, handle)


async def not_found(request: Request) -> Response:
    return error_json(404, "no such API route")


def routes() -> list[Route]:
    return [
        Route("/api/queues", queues, methods=["GET"]),
        Route("/api/queues/{queue}", queue, methods=["GET"]),
        Route("/api/queues/{queue}/dead", dead, methods=["GET"]),
        Route("/api/queues/{queue}/pause", _pause_route(True), methods=["POST"]),
        Route("/api/queues/{queue}/resume", _pause_route(False), methods=["POST"]),
        Route("/api/queues/{queue}/dead/requeue", dead_requeue, methods=["POST"]),
        Route("/api/queues/{queue}/dead/purge", dead_purge, methods=["POST"]),
        Route("/api/tasks/{task_id}", task, methods=["GET"]),
        Route("/api/tasks/{task_id}/status", task_status, methods=["GET"]),
        Route("/api/workflows/{workflow_id}", workflow_status, methods=["GET"]),
        Route("/api/tasks/{task_id}/cancel", cancel, methods=["POST"]),
    ]
