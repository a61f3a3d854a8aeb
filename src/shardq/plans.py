"""Plans: an operation's logic written once, run by the sync gateway and by the asyncio one.

A *plan* is a generator that yields requests for the database and receives their answers. It
decides which named statements run, with which parameters, in which transaction, and what their
rows mean; it never does I/O itself and never imports psycopg. Two small drivers run plans:
:func:`run` on a :class:`shardq.db.Session` (the sync :class:`shardq.Client`, workers, the CLI) and
:func:`run_async` on a :class:`shardq.db_async.AsyncSession` (:class:`shardq.AsyncClient`). So the
sync and the asyncio client send the same statements, with the same parameters, under the same
rules: there is no second copy of the enqueue, exclusive-key, cancel or stats logic.

Requests and their answers
    * :class:`Call` — one named statement from ``sql/``: its rows (``rows="all"``, a list of dicts),
      its first row or None (``"one"``), or None (``"none"``).
    * :class:`Atomically` — run ``body()``, a plan, inside one transaction and answer its result.
      On a 40001 the gateway re-runs the whole transaction with a *fresh* ``body()``, so a body
      may run more than once and must have no side effects other than its statements.
    * :class:`UseShardColumn` — point the session's ``{shard_col}`` statements at this column.
    * :data:`ENGINE` — the session's :class:`~shardq.engine.Engine` (the first one connects).

    A shardq error raised by a request is thrown into the plan at its ``yield``, so plans handle
    errors with ``try``/``except`` like ordinary code; an unhandled one leaves the driver.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypeVar

from .errors import ShardqError

if TYPE_CHECKING:
    from .db import Session
    from .db_async import AsyncSession

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Call:
    """Run the named statement ``name`` with ``params``; see the module documentation for
    ``rows``. ``resend_ambiguous``: safe to re-send after CockroachDB's 40003 (see :mod:`shardq.db`)."""

    name: str
    params: Mapping[str, Any] | None = None
    rows: Literal["all", "one", "none"] = "all"
    resend_ambiguous: bool = False


@dataclass(frozen=True, slots=True)
class Atomically:
    """Run the plan ``body()`` makes inside one transaction (made afresh for each attempt)."""

    body: Callable[[], Plan[Any]]


@dataclass(frozen=True, slots=True)
class UseShardColumn:
    """Fill ``{shard_col}`` with ``column`` from now on (CockroachDB; None elsewhere)."""

    column: str | None


class _EngineRequest:
    def __repr__(self) -> str:
        return "ENGINE"


#: Yield this to receive the session's engine.
ENGINE = _EngineRequest()

Request: TypeAlias = Call | Atomically | UseShardColumn | _EngineRequest
Plan: TypeAlias = Generator[Request, Any, T]


def run(session: Session, plan: Plan[T]) -> T:
    """Run ``plan`` on a sync session and return its result."""
    value: Any = None
    error: ShardqError | None = None
    while True:
        try:
            request = plan.send(value) if error is None else plan.throw(error)
        except StopIteration as stop:
            return stop.value
        error = None
        try:
            value = _serve(session, request)
        except ShardqError as exc:
            value, error = None, exc


def _serve(session: Session, request: Request) -> Any:
    if isinstance(request, Call):
        if request.rows == "one":
            return session.fetch_one(request.name, request.params)
        if request.rows == "none":
            session.execute(request.name, request.params)
            return None
        return session.fetch_all(request.name, request.params, resend_ambiguous=request.resend_ambiguous)
    if isinstance(request, Atomically):
        body = request.body
        return session.transaction(lambda s: run(s, body()))
    if isinstance(request, UseShardColumn):
        session.set_shard_column(request.column)
        return None
    return session.engine


async def run_async(session: AsyncSession, plan: Plan[T]) -> T:
    """Run ``plan`` on an asyncio session and return its result (same rules as :func:`run`)."""
    value: Any = None
    error: ShardqError | None = None
    while True:
        try:
            request = plan.send(value) if error is None else plan.throw(error)
        except StopIteration as stop:
            return stop.value
        error = None
        try:
            value = await _serve_async(session, request)
        except ShardqError as exc:
            value, error = None, exc


async def _serve_async(session: AsyncSession, request: Request) -> Any:
    if isinstance(request, Call):
        if request.rows == "one":
            return await session.fetch_one(request.name, request.params)
        if request.rows == "none":
            await session.execute(request.name, request.params)
            return None
        return await session.fetch_all(request.name, request.params, resend_ambiguous=request.resend_ambiguous)
    if isinstance(request, Atomically):
        body = request.body
        return await session.transaction(lambda s: run_async(s, body()))
    if isinstance(request, UseShardColumn):
        session.set_shard_column(request.column)
        return None
    return await session.get_engine()
