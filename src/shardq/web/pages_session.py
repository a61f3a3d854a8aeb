"""Signing in and out of the dashboard: ``/login`` (the form, and the post that exchanges the
full or the read-only token for a session cookie) and ``/logout``. See :mod:`shardq.web.auth`."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from shardq.web.auth import LOGIN_PATH, client_address, expired_cookie, session_cookie
from shardq.web.context import Dashboard, Failure
from shardq.web.mount import redirect, root
from shardq.web.pages import (
    error_page,
    form_value,
    local_path,
    login_page,
    read_form,
    submit_form,
    throttled_login_page,
)


async def login(request: Request) -> Response:
    if request.method == "GET":
        return login_page(request, next_path=request.query_params.get("next", "/"))
    dashboard = Dashboard.of(request)
    address = client_address(request.scope)
    wait = dashboard.auth.throttle.wait_seconds(address)
    if wait:  # before reading the body: a waiting address's guesses are not even compared
        return throttled_login_page(request, wait)
    try:
        form = await read_form(request)
    except Failure as failure:
        return error_page(request, failure.status, failure.message)
    next_path = form_value(form, "next") or "/"
    supplied = form_value(form, "token")
    full = dashboard.auth.token_ok(supplied)
    if not full and not dashboard.auth.read_token_ok(supplied):
        dashboard.auth.throttle.failed(address)
        return login_page(request, 401, "That is not the token.", next_path)
    dashboard.auth.throttle.succeeded(address)
    session_id, _ = dashboard.auth.sessions.create(read_only=not full)
    response = redirect(request, local_path(next_path))
    response.headers.append("Set-Cookie", session_cookie(session_id, root(request.scope)))
    return response


async def logout(request: Request) -> Response:
    async def act(form: dict[str, list[str]]) -> str:
        session_id = Dashboard.identity(request).session_id
        if session_id:
            Dashboard.of(request).auth.sessions.end(session_id)
        return LOGIN_PATH

    response = await submit_form(request, act)
    if response.status_code == 303:
        response.headers.append("Set-Cookie", expired_cookie(root(request.scope)))
    return response


def routes() -> list[Route]:
    return [
        Route(LOGIN_PATH, login, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
    ]
