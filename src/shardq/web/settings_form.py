"""Editing a queue's settings and limits from its page: ``POST /queues/{queue}/settings`` (the
form, after a confirmation) and ``POST /api/queues/{queue}/settings`` (JSON), both through
:func:`shardq.admin.actions.queue_set_plan`, which validates every value before anything is written (so a
refused change changes nothing) and changes a limit together with the rows that enforce it.

Fields: ``lease_seconds``, ``max_attempts``, ``backoff_base``, ``backoff_cap``, ``retry_jitter``,
``exclusive_latest_only``, ``timeout_seconds`` (empty: no timeout), ``concurrency`` and ``rate``
(0 or empty: no limit), ``burst`` (only with a rate). Pausing has its own buttons.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from shardq.admin import actions as admin
from shardq.errors import InvalidInput
from shardq.sessions.store import TaskStore
from shardq.web.api import call_action, checked_action
from shardq.web.context import run_action
from shardq.web.pages import form_value, queue_path, submit_form
from shardq.web.views import known_queue

_FLOATS = ("lease_seconds", "backoff_base", "backoff_cap", "retry_jitter")
_INTS = ("max_attempts", "concurrency", "rate", "burst")


def _number(name: str, text: str) -> float | int:
    try:
        return int(text) if name in _INTS else float(text)
    except ValueError:
        kind = "a whole number" if name in _INTS else "a number"
        raise InvalidInput(f"{name.replace('_', ' ')} must be {kind}") from None


def parse_form(form: dict[str, list[str]]) -> dict[str, Any]:
    """The changes a settings form asks for (text fields parsed; the checkbox's absence is off)."""
    changes: dict[str, Any] = {}
    for name in (*_FLOATS, *_INTS):
        text = (form_value(form, name) or "").strip()
        if name in ("concurrency", "rate") and not text:
            text = "0"
        if text:
            changes[name] = _number(name, text)
    timeout = (form_value(form, "timeout_seconds") or "").strip()
    if timeout:
        changes["timeout_seconds"] = _number("timeout_seconds", timeout)
    else:
        changes["timeout_clear"] = True
    changes["exclusive_latest_only"] = form_value(form, "exclusive_latest_only") == "1"
    return changes


def update(store: TaskStore, queue: str, changes: dict[str, Any]) -> dict[str, Any]:
    """Apply ``changes`` to a known queue (see :func:`shardq.admin.actions.queue_set_plan`); its new settings."""
    known_queue(store, queue)
    settings = store.run(admin.queue_set_plan(queue, changes))
    assert settings is not None
    return settings.as_json()


def update_from_form(store: TaskStore, queue: str, form: dict[str, list[str]]) -> dict[str, Any]:
    """:func:`update` with the changes a form asks for (parsed on the view's thread, so bad input
    is a 400 like any view's)."""
    return update(store, queue, parse_form(form))


async def settings_form(request: Request) -> Response:
    name = request.path_params["queue"]

    async def act(form: dict[str, list[str]]) -> str:
        await run_action(request, "change settings", f"queue {name}", update_from_form, name, form)
        return queue_path(name, "?done=settings")

    return await submit_form(request, act)


async def settings_api(request: Request) -> Response:
    name = request.path_params["queue"]

    async def handle(body: dict[str, Any]) -> Response:
        return await call_action(request, "change settings", f"queue {name}", update, name, body)

    return await checked_action(request, handle)


def routes() -> list[Route]:
    return [
        Route("/queues/{queue}/settings", settings_form, methods=["POST"]),
        Route("/api/queues/{queue}/settings", settings_api, methods=["POST"]),
    ]
