"""The dashboard's ASGI application: :func:`create_app` wires auth, the JSON API and the pages."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from shardq.admin.stats import StatsOptions
from shardq.client import Client
from shardq.web import api, api_tasks, pages, pages_session, pages_tasks, periodic_page, settings_form, workflow_page
from shardq.web.auth import Auth, AuthGate, Scope, resolve_read_token
from shardq.web.context import Dashboard
from shardq.web.mount import route_path


def _refuse(scope: Scope, retry_after: int | None) -> Any:
    """The 401 for a request without the token (or the 429 for an address that must wait
    ``retry_after`` seconds after too many wrong ones): JSON for the API, the login form for pages."""
    path = route_path(scope)
    if path.startswith("/api/"):
        if retry_after is not None:
            return JSONResponse(
                {"error": pages.throttled_text(retry_after)},
                status_code=429,
                headers={"Retry-After": str(retry_after), "Cache-Control": "no-store"},
            )
        return JSONResponse(
            {"error": "the dashboard token is required (Authorization: Bearer TOKEN)"},
            status_code=401,
            headers={"WWW-Authenticate": "Bearer", "Cache-Control": "no-store"},
        )
    request = Request(scope)
    if retry_after is not None:
        return pages.throttled_login_page(request, retry_after)
    next_path = path if scope["method"] == "GET" else "/"
    if scope["method"] == "GET" and scope.get("query_string"):
        next_path += "?" + scope["query_string"].decode("latin-1")
    return pages.login_page(request, 401, None, next_path)


def _forbid(scope: Scope) -> Any:
    """The 403 for a read-only identity's request that would change something."""
    message = "this token is read-only: it can see everything and change nothing"
    if route_path(scope).startswith("/api/"):
        return JSONResponse({"error": message}, status_code=403, headers={"Cache-Control": "no-store"})
    return pages.error_page(Request(scope), 403, message.capitalize() + ".")


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if route_path(request.scope).startswith("/api/"):
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code, headers={"Cache-Control": "no-store"})
    return pages.error_page(request, exc.status_code, str(exc.detail))


def create_app(
    client: Client,
    token: str,
    *,
    stats_options: StatsOptions | None = None,
    refresh_seconds: float = 2.0,
    history_points: int = 150,
    started: threading.Event | None = None,
    read_token: str | None = None,
    schedules: list[Any] | None = None,
    upstream_login: bool = False,
) -> Starlette:
    """The dashboard for ``client``'s database, requiring ``token`` on every request (see
    :mod:`shardq.web.auth`). ``stats_options`` bound the counting exactly as for ``shardq stats``;
    the overview polls the API every ``refresh_seconds`` and its charts keep ``history_points``
    samples. ``started`` is set once the application has started (its lifespan began), so a
    caller running it in a thread can wait for that instead of sleeping. ``read_token``: a second
    token that sees everything and changes nothing (see :mod:`shardq.web.auth`). ``schedules``: an
    app's periodic schedules (:class:`shardq.maintenance.periodic.Schedule`), for the Periodic page.
    ``upstream_login``: the enclosing application signs people in and hands over who they are
    (:data:`shardq.web.auth.UPSTREAM_IDENTITY`; :mod:`shardq.contrib.django.dashboard`); only for a
    dashboard reachable through that application alone (default False)."""
    if refresh_seconds <= 0:
        raise ValueError("refresh_seconds must be positive")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if started is not None:
            started.set()
        yield

    dashboard = Dashboard(
        client,
        Auth(token, read_token=resolve_read_token(read_token, token), upstream=upstream_login),
        (stats_options or StatsOptions()).validate(),
        refresh_seconds,
        history_points,
        schedules,
    )
    app = Starlette(
        routes=[
            *api.routes(),
            *api_tasks.routes(),
            *pages.routes(),
            *pages_session.routes(),
            *pages_tasks.routes(),
            *settings_form.routes(),
            *periodic_page.routes(),
            *workflow_page.routes(),
        ],
        middleware=[Middleware(AuthGate, auth=dashboard.auth, refuse=_refuse, forbid=_forbid)],
        exception_handlers={HTTPException: _http_error},
        lifespan=lifespan,
    )
    app.state.dashboard = dashboard
    return app
