"""The asyncio session: :class:`AsyncSession`, the asyncio twin of :class:`shardq.sessions.session.Session`.

It runs plans (:meth:`AsyncSession.run`) and the named statements they request on one
``psycopg.AsyncConnection`` (no threads: every round trip is awaited on the caller's event loop)
under the rules :mod:`shardq.sessions.rules` documents, through the same helpers, so the two
sessions cannot drift apart:

* connect: the engine's startup options and pinned isolation level, the engine learnt from the
  server (a ``postgresql://`` URL reaching CockroachDB reopens once with CockroachDB's options),
  the server version checked (:func:`shardq.sessions.rules.connect_arguments`, :func:`shardq.sessions.rules.isolation_of`);
* statements: the engine's named statements from ``sql/``, ``{shard_col}`` composed with
  ``psycopg.sql.Identifier`` (:func:`shardq.sessions.rules.compose_statement`);
* 40001 retried with full-jitter backoff (the statement alone in autocommit, the whole body in
  :meth:`AsyncSession.transaction`); 40003 re-sent only for statements marked safe
  (:func:`shardq.sessions.rules.resend_after`, :func:`shardq.sessions.rules.retry_pause`);
* every ``psycopg.Error`` leaves as a :class:`shardq.errors.DatabaseError` subclass with the
  original as ``__cause__`` and the DSN's password redacted, a connection it broke dropped first
  (:func:`shardq.sessions.rules.discard_if_broken`).

Laid out and named as the sync session: :meth:`AsyncSession.connection` (awaited here),
:attr:`AsyncSession.engine`, :meth:`AsyncSession.run`, ``fetch_all``/``fetch_one``/``execute``,
:meth:`AsyncSession.transaction`. The asyncio session on a caller's connection,
:class:`shardq.sessions.borrowed.AsyncBorrowedSession`, sits beside the sync one in
:mod:`shardq.sessions.borrowed`.

Does not: pool connections (one connection per session; statements of one session run one at a
time), LISTEN, run DDL or COPY, or read engine-internal catalogs (a plan asking for one of these
raises :class:`~shardq.errors.InvalidInput`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pgerrors
from psycopg.rows import dict_row, tuple_row

from shardq.engine import POSTGRESQL, engine_for_server
from shardq.engine.base import Engine
from shardq.errors import InvalidInput, SerializationConflict, ShardqError
from shardq.sessions.dsn import Dsn
from shardq.sessions.rules import (
    _translate,
    compose_statement,
    connect_arguments,
    discard_if_broken,
    isolation_of,
    resend_after,
    retry_pause,
)
from shardq.sql.plan import Atomically, Call, CopyIn, Plan, SchemaChange, UseShardColumn, WithInternals

log = logging.getLogger("shardq.sessions.session_async")


T = TypeVar("T")


class AsyncSession:
    """One ``psycopg.AsyncConnection`` and the named statements run on it. Not safe for
    concurrent use: one operation at a time (:class:`shardq.AsyncClient` serialises its calls).

    Options as :class:`shardq.sessions.session.Session`: ``application_name``, ``max_retries`` after a 40001
    (the engine's policy by default), ``statement_timeout_ms``."""

    def __init__(
        self,
        dsn: Dsn,
        *,
        application_name: str = "shardq",
        max_retries: int | None = None,
        statement_timeout_ms: int | None = None,
    ) -> None:
        self.dsn = dsn
        self.application_name = application_name
        self._max_retries = max_retries
        self.statement_timeout_ms = statement_timeout_ms
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._engine: Engine | None = dsn.named_engine
        self._shard_column: str | None = None
        self._in_transaction = False
        #: statements run on a connection the caller owns, inside its transaction
        self.borrowed = False
        #: test hook, as :attr:`shardq.sessions.session.Session.before_statement`: called before each attempt
        #: of a statement with its name; may raise
        self.before_statement: Callable[[str], None] | None = None

    # -- connection -------------------------------------------------------------------------
    async def connection(self) -> psycopg.AsyncConnection[Any]:
        """The open connection, connecting (or reconnecting after a loss) first."""
        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return self._conn
        await self._discard()
        assumed = self._engine or POSTGRESQL
        conn = await self._open(assumed)
        found = engine_for_server(conn.info.parameter_status)
        options: dict[str, Any] = {"statement_timeout_ms": self.statement_timeout_ms, "internals": False}
        if found is not assumed and found.startup_options(**options) != assumed.startup_options(**options):
            await conn.close()  # reopen with the engine's own startup options (see shardq.sessions.session)
            conn = await self._open(found)
        try:
            found.check_version(conn.info.parameter_status)
        except InvalidInput:
            await conn.close()
            raise
        isolation = isolation_of(found)
        try:
            if isolation is not None:
                await conn.set_isolation_level(isolation)
        except psycopg.Error as exc:
            await conn.close()
            raise _translate(exc, self.dsn) from exc
        self._engine = found
        self._conn = conn
        return conn

    async def _open(self, engine: Engine) -> psycopg.AsyncConnection[Any]:
        arguments = connect_arguments(
            self.dsn,
            engine,
            application_name=self.application_name,
            statement_timeout_ms=self.statement_timeout_ms,
            internals=False,
        )
        try:
            return await psycopg.AsyncConnection.connect(self.dsn.conninfo, **arguments)
        except psycopg.Error as exc:
            raise _translate(exc, self.dsn) from exc

    async def _discard(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                await self._conn.close()
        self._conn = None

    def _drop_broken(self) -> None:
        """Drop a connection an error left closed or broken (:func:`shardq.sessions.rules.discard_if_broken`):
        it has nothing left to say to its server, so dropping it needs no round trip."""
        self.abandon()

    async def close(self) -> None:
        await self._discard()

    def abandon(self) -> None:
        """Close the connection without its event loop, which has ended (an ``AsyncConnection``
        cannot be awaited on another loop): the libpq connection is finished at once."""
        if self._conn is not None and not self._conn.closed:
            with contextlib.suppress(psycopg.Error):
                self._conn.pgconn.finish()
        self._conn = None

    @property
    def engine(self) -> Engine:
        """The database engine behind this session (:mod:`shardq.engine`): named by the URL, or
        learnt from the server at the first connect. A property cannot connect, so the engine of
        a ``postgresql://`` URL is known only once :meth:`connection` has been awaited (every
        statement awaits it; :meth:`shardq.AsyncClient.connect` does it up front); before that,
        reading it raises :class:`~shardq.errors.ShardqError`."""
        if self._engine is None:
            raise ShardqError(
                "the engine of a postgresql:// URL is learnt at the first connect:"
                " await the session's connection() first"
            )
        return self._engine

    @property
    def max_retries(self) -> int:
        if self._max_retries is not None:
            return self._max_retries
        return (self._engine or POSTGRESQL).retry.serialization_retries

    def set_shard_column(self, column: str | None) -> None:
        self._shard_column = column

    # -- plans --------------------------------------------------------------------------------
    async def run(self, plan: Plan[T]) -> T:
        """Run ``plan`` (:mod:`shardq.sql.plan`) on this session and return its result, under the
        rules of :meth:`shardq.sessions.session.Session.run`."""
        value: Any = None
        error: ShardqError | None = None
        while True:
            try:
                request = plan.send(value) if error is None else plan.throw(error)
            except StopIteration as stop:
                return stop.value
            error = None
            try:
                value = await _serve(self, request)
            except ShardqError as exc:
                value, error = None, exc

    # -- statements ---------------------------------------------------------------------------
    async def _run(
        self,
        name: str,
        params: Mapping[str, Any] | None,
        fetch: bool,
        resend_ambiguous: bool = False,
        identifiers: Mapping[str, str] | None = None,
        binary: bool = False,
        tuples: bool = False,
    ) -> list[Any]:
        attempt = 0
        while True:
            attempt += 1
            try:
                conn = await self.connection()
                query = compose_statement(self.engine, name, self._shard_column, identifiers or {})
                if self.before_statement is not None:
                    self.before_statement(name)
                async with conn.cursor(binary=binary, row_factory=tuple_row if tuples else dict_row) as cur:
                    await cur.execute(query, params or {})
                    return await cur.fetchall() if fetch and cur.description is not None else []
            except psycopg.Error as exc:
                if resend_after(
                    exc,
                    name=name,
                    attempt=attempt,
                    max_retries=self.max_retries,
                    in_transaction=self._in_transaction,
                    resend_ambiguous=resend_ambiguous,
                ):
                    await asyncio.sleep(retry_pause(attempt, policy=self.engine.retry))
                    continue
                raise discard_if_broken(self, exc, name) from exc

    async def fetch_all(
        self,
        name: str,
        params: Mapping[str, Any] | None = None,
        *,
        resend_ambiguous: bool = False,
        identifiers: Mapping[str, str] | None = None,
        binary: bool = False,
        tuples: bool = False,
    ) -> list[Any]:
        """Run the named statement and return its rows (options as
        :meth:`shardq.sessions.session.Session.fetch_all`)."""
        return await self._run(name, params, True, resend_ambiguous, identifiers, binary, tuples)

    async def fetch_one(
        self, name: str, params: Mapping[str, Any] | None = None, *, identifiers: Mapping[str, str] | None = None
    ) -> dict[str, Any] | None:
        rows = await self._run(name, params, True, identifiers=identifiers)
        return rows[0] if rows else None

    async def execute(
        self, name: str, params: Mapping[str, Any] | None = None, *, identifiers: Mapping[str, str] | None = None
    ) -> None:
        await self._run(name, params, False, identifiers=identifiers)

    async def transaction(self, body: Callable[[AsyncSession], Awaitable[T]]) -> T:
        """Run ``await body(self)`` inside one transaction, retrying the whole body on 40001.
        ``body`` may therefore run more than once: it must have no side effects other than
        writes through this session."""
        attempt = 0
        while True:
            attempt += 1
            try:
                conn = await self.connection()
                outer, self._in_transaction = self._in_transaction, True  # see Session._transaction_block
                try:
                    async with conn.transaction():
                        return await body(self)
                finally:
                    self._in_transaction = outer
            except SerializationConflict as exc:
                if attempt > self.max_retries:
                    raise
                log.debug("transaction hit 40001 (attempt %d): %s", attempt, exc)
                await asyncio.sleep(retry_pause(attempt, policy=self.engine.retry))
            except psycopg.Error as exc:
                if isinstance(exc, pgerrors.SerializationFailure) and attempt <= self.max_retries:
                    await asyncio.sleep(retry_pause(attempt, policy=self.engine.retry))
                    continue
                raise discard_if_broken(self, exc) from exc


async def _serve(session: AsyncSession, request: Any) -> Any:
    if isinstance(request, Call):
        if request.rows == "all":
            return await session.fetch_all(
                request.name,
                request.params,
                resend_ambiguous=request.resend_ambiguous,
                identifiers=request.identifiers,
                binary=request.binary,
                tuples=request.tuples,
            )
        if request.rows == "one":
            return await session.fetch_one(request.name, request.params, identifiers=request.identifiers)
        await session.execute(request.name, request.params, identifiers=request.identifiers)
        return None
    if isinstance(request, Atomically):
        body = request.body
        return await session.transaction(lambda s: s.run(body()))
    if isinstance(request, UseShardColumn):
        session.set_shard_column(request.column)
        return None
    if isinstance(request, (WithInternals, SchemaChange, CopyIn)):
        raise InvalidInput(f"{type(request).__name__} needs the sync session")
    if session._engine is None:  # named by the URL, else learnt at the first connect
        await session.connection()
    return session.engine
