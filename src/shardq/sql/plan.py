"""Plans: an operation's logic written once, run by the sync session and by the asyncio one.

A *plan* is a generator that yields requests for the database and receives their answers. It
decides which named statements run, with which parameters, in which transaction, and what their
rows mean; it never does I/O itself and never imports psycopg. This module is only the
vocabulary: the requests below. The sessions run plans — :meth:`shardq.sessions.session.Session.run` (the sync
:class:`shardq.Client`, workers, the CLI) and :meth:`shardq.sessions.session_async.AsyncSession.run`
(:class:`shardq.AsyncClient`) — so the sync and the asyncio client send the same statements, with
the same parameters, under the same rules: there is no second copy of the enqueue, exclusive-key,
cancel or stats logic. It imports nothing of shardq: the engines, which write their operations as
plans, and the sessions, which run them, both stand on it.

Requests and their answers
    * :class:`Call` — one named statement from ``sql/``: its rows (``rows="all"``, a list of dicts,
      or of tuples with ``tuples``), its first row or None (``"one"``), or None (``"none"``).
    * :class:`SchemaChange` — one named DDL statement, its slots filled with names or integers.
    * :class:`CopyIn` — ``COPY … FROM STDIN`` of a named statement (the Spark COPY writer).
    * :class:`Atomically` — run ``body()``, a plan, inside one transaction and answer its result.
      On a 40001 the session re-runs the whole transaction with a *fresh* ``body()``, so a body
      may run more than once and must have no side effects other than its statements.
    * :class:`UseShardColumn` — point the session's ``{shard_col}`` statements at this column.
    * :class:`WithInternals` — run ``body()`` on a session that may read engine-internal catalogs.
    * :data:`ENGINE` — the session's :class:`~shardq.engine.Engine` (the first one connects).

    A shardq error raised by a request is thrown into the plan at its ``yield``, so plans handle
    errors with ``try``/``except`` like ordinary code; an unhandled one leaves the session's
    ``run``."""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, TypeVar

T = TypeVar("T")


# Not frozen: a frozen dataclass's __init__ costs about four times as much, and a Call is built
# for every statement, the claim's and the ack's included. Nothing changes a Call once made.
@dataclass(slots=True)
class Call:
    """Run the named statement ``name`` with ``params``; see the module documentation for
    ``rows``. ``resend_ambiguous``: safe to re-send after CockroachDB's 40003 (see :mod:`shardq.sessions.rules`).
    ``binary``: results in the server's binary format; ``tuples``: rows as tuples in the
    statement's column order (both for the claim, whose rows become objects at once; see
    :meth:`shardq.sessions.session.Session.fetch_all`). ``identifiers`` fills the statement's ``{slot}``
    placeholders other than ``{shard_col}`` (a Spark staging table's name)."""

    name: str
    params: Mapping[str, Any] | None = None
    rows: Literal["all", "one", "none"] = "all"
    resend_ambiguous: bool = False
    binary: bool = False
    tuples: bool = False
    identifiers: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class SchemaChange:
    """Run the named DDL statement ``name`` with its ``{slots}`` filled: names from
    ``identifiers``, whole numbers from ``literals`` (see :meth:`shardq.sessions.session.Session.execute_ddl`).
    Answers None. The sync session only: the asyncio one runs no DDL."""

    name: str
    identifiers: Mapping[str, str] | None = None
    literals: Mapping[str, int] | None = None


@dataclass(frozen=True, slots=True)
class CopyIn:
    """``COPY … FROM STDIN`` of the named statement with ``data`` (bytes, or a list of them), in
    the current transaction (see :meth:`shardq.sessions.session.Session.copy_in`). Answers None. The sync
    session only."""

    name: str
    data: Any
    identifiers: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class Atomically:
    """Run the plan ``body()`` makes inside one transaction (made afresh for each attempt)."""

    body: Callable[[], Plan[Any]]


@dataclass(frozen=True, slots=True)
class UseShardColumn:
    """Fill ``{shard_col}`` with ``column`` from now on (CockroachDB; None elsewhere)."""

    column: str | None


@dataclass(frozen=True, slots=True)
class WithInternals:
    """Run the plan ``body()`` makes on a session that may read engine-internal catalogs
    (CockroachDB's ``crdb_internal`` jobs; see :meth:`shardq.engine.Engine.startup_options`):
    this session when it was opened so, else a sibling opened for the body. Operators' reads
    only; the asyncio session has none."""

    body: Callable[[], Plan[Any]]


class _EngineRequest:
    def __repr__(self) -> str:
        return "ENGINE"


#: Yield this to receive the session's engine.
ENGINE = _EngineRequest()


Request: TypeAlias = Call | SchemaChange | CopyIn | Atomically | UseShardColumn | WithInternals | _EngineRequest


Plan: TypeAlias = Generator[Request, Any, T]


def single(request: Request) -> Plan[Any]:
    """The plan of one request: its answer."""
    answer = yield request
    return answer
