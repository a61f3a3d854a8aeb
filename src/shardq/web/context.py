"""What every route shares: the :class:`Dashboard` (client, auth, options, templates),
:func:`run_view`, which runs a view off the event loop and turns its errors into statuses,
:func:`run_action`, the same for an action, which it records in the audit log, and
:func:`read_body`, which reads a request body without letting it grow past a limit."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from shardq.admin.stats import StatsOptions
from shardq.client import Client
from shardq.errors import DatabaseError, InvalidInput, ShardqError
from shardq.operations import registry
from shardq.sessions.dsn import redact_text
from shardq.web.auth import Auth, Identity, client_address, csrf_ok
from shardq.web.views import NotFound

log = logging.getLogger("shardq.web")


class Failure(Exception):
    """A request that cannot be served: an HTTP status and a message safe to show."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Dashboard:
    """One dashboard's state. ``refresh_seconds``: how often the overview polls the API;
    ``history_points``: samples its charts keep (a ring buffer in the browser); ``schedules``: the
    app's periodic schedules, when the dashboard was given the app."""

    client: Client
    auth: Auth
    stats_options: StatsOptions = field(default_factory=StatsOptions)
    refresh_seconds: float = 2.0
    history_points: int = 150
    #: the periodic schedules of the app given to ``shardq web --app`` (the Periodic page); None without one
    schedules: list[Any] | None = None

    @staticmethod
    def of(request: Request) -> Dashboard:
        return request.app.state.dashboard

    @staticmethod
    def identity(request: Request) -> Identity:
        return request.scope["state"]["identity"]

    def csrf_ok(self, request: Request, supplied: str | None) -> bool:
        return csrf_ok(self.identity(request), supplied)

    def safe_message(self, exc: BaseException) -> str:
        """An error's first line with the database password removed (shardq's own errors
        already leave it out; this is a second guard, since the page is shown to a browser)."""
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return redact_text(text, self.client.dsn.conninfo)


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, at most ``limit`` bytes. Raises :class:`Failure` 413 as soon as it is
    known to be larger: at once from a ``Content-Length`` above ``limit`` (nothing is read), or
    while streaming, once the chunks received pass ``limit`` (nothing more is read). So an
    oversized body costs at most ``limit`` plus one chunk of memory, whoever sends it."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.strip().isdigit():
            raise Failure(400, "Content-Length is not a number")
        if int(declared) > limit:
            raise Failure(413, f"body too large (at most {limit} bytes)")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise Failure(413, f"body too large (at most {limit} bytes)")
        chunks.append(chunk)
    return b"".join(chunks)


#: Characters of an action's outcome kept in its audit entry.
AUDIT_DETAIL_MAX = 2000


async def run_action(
    request: Request, action: str, target: str, view: Callable[..., Any], *args: Any, **kwargs: Any
) -> Any:
    """:func:`run_view` for an action that changes something: once it succeeded, an audit entry
    says who (:meth:`~shardq.web.auth.Identity.describe`), ``action``, ``target`` and the outcome,
    on the same thread's session. A refused action is not recorded (it changed nothing). If the
    entry cannot be written, the action stands and the server log says so."""
    actor = Dashboard.identity(request).describe(client_address(request.scope))

    def act_and_record(store: Any, *a: Any, **kw: Any) -> Any:
        result = view(store, *a, **kw)
        detail = json.dumps(result, default=str, ensure_ascii=False)[:AUDIT_DETAIL_MAX]
        try:
            store.run(registry.audit_add(actor, action, target, detail))
        except DatabaseError as exc:
            log.error("audit entry for %s on %s not written: %s", action, target, exc)
        return result

    return await run_view(request, act_and_record, *args, **kwargs)


async def run_view(request: Request, view: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``view(store, *args, **kwargs)`` in a worker thread with that thread's store (one
    database session per thread, :attr:`shardq.client.Client.store`). Raises :class:`Failure`:
    404 for :class:`NotFound`, 400 for bad input, 503 for a database failure."""
    dashboard = Dashboard.of(request)

    def call() -> Any:
        return view(dashboard.client.store, *args, **kwargs)

    try:
        return await run_in_threadpool(call)
    except NotFound as exc:
        raise Failure(404, str(exc)) from None
    except InvalidInput as exc:
        raise Failure(400, dashboard.safe_message(exc)) from None
    except DatabaseError as exc:
        log.warning("database error serving %s: %s", request.url.path, exc)
        raise Failure(503, "database error: " + dashboard.safe_message(exc)) from None
    except ShardqError as exc:
        raise Failure(500, dashboard.safe_message(exc)) from None
