"""The sync session: one database connection, the named statements and plans run on it.

:class:`Session` connects (the engine's startup options, its pinned isolation level, the engine
learnt from the server), runs plans (:meth:`Session.run`, the one way shardq's modules send named
statements) and the statements they request, and translates errors. It also sends what falls
outside the named-statement path: DDL with its slots filled (:meth:`Session.execute_ddl`), SQL
composed elsewhere (:meth:`Session.execute_raw`: migrations' probes, admin), a transaction that is
always rolled back (:meth:`Session.rolled_back`, ``shardq doctor``), ``COPY … FROM STDIN``
(:meth:`Session.copy_in`, the Spark COPY writer) and EXPLAIN for query-plan checks
(:meth:`Session.explain`); none of these is retried after a 40001 on its own.

The rules it follows — autocommit, the 40001/40003 retries, why a re-sent ack is safe, error
translation, dropping a broken connection — are shared with the asyncio session
(:mod:`shardq.sessions.session_async`, laid out as this module) and written once in
:mod:`shardq.sessions.rules`. Only the modules of :mod:`shardq.sessions` touch psycopg (the
sessions on a caller's connection are in :mod:`shardq.sessions.borrowed`); everything else yields
requests (:mod:`shardq.sql.plan`) and gets dict rows or shardq errors back.

Engines
    The session's :attr:`Session.engine` (:mod:`shardq.engine`) gives the statements, startup
    options, pinned isolation, retry policy and supported versions. A ``cockroachdb://`` URL names
    it up front; a ``postgresql://`` URL learns it from the server at the first connect (reopening
    once with the engine's own options if they differ). A server older than the engine supports is
    refused with :class:`~shardq.errors.UnsupportedServer`.

Does not
    * pool connections: each worker thread or service owns its session;
    * reconnect silently in the middle of a transaction. After a lost connection the next call
      opens a new one; the call that saw the loss raises :class:`DatabaseUnavailable`."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pgerrors
from psycopg import sql
from psycopg.rows import dict_row, tuple_row

from shardq.engine import POSTGRESQL, engine_for_server
from shardq.engine.base import Engine
from shardq.errors import DatabaseError, InvalidInput, SerializationConflict, ShardqError
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

log = logging.getLogger("shardq.sessions.session")


T = TypeVar("T")


class Session:
    """One database connection and the statements run on it. Not thread-safe: one per thread.

    ``shard_column`` fills the ``{shard_col}`` slot of CockroachDB statements; set it with
    :meth:`set_shard_column` whenever the layout is (re)discovered. Other slots are filled per
    call through the ``identifiers`` argument of :meth:`fetch_all`/:meth:`fetch_one`/:meth:`execute`.

    Options (defaults): ``application_name`` ("shardq"); ``max_retries`` after a 40001 (the
    engine's policy, 10); ``statement_timeout_ms`` (None: the server's); ``internals`` (False):
    the session reads engine-internal catalogs and opts in to them (CockroachDB's
    ``allow_unsafe_internals``; only operators' reads need it).
    """

    def __init__(
        self,
        dsn: Dsn,
        *,
        application_name: str = "shardq",
        max_retries: int | None = None,
        statement_timeout_ms: int | None = None,
        internals: bool = False,
    ) -> None:
        self.dsn = dsn
        self.application_name = application_name
        self._max_retries = max_retries
        self.statement_timeout_ms = statement_timeout_ms
        self.internals = internals
        self._conn: psycopg.Connection[Any] | None = None
        self._engine: Engine | None = dsn.named_engine
        self._shard_column: str | None = None
        self._composed: dict[tuple[str, str | None], Any] = {}
        self._in_transaction = False
        self._listening: list[str] = []  # LISTEN statements to re-run on every new connection
        #: statements run on a connection the caller owns, inside its transaction (BorrowedSession)
        self.borrowed = False
        #: test hook: called before each attempt of a statement with its name; may raise
        self.before_statement: Callable[[str], None] | None = None

    # -- connection -------------------------------------------------------------------------
    def connection(self) -> psycopg.Connection[Any]:
        """The open connection, connecting (or reconnecting after a loss) first."""
        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return self._conn
        self._discard()
        assumed = self._engine or POSTGRESQL
        conn = self._open(assumed)
        found = engine_for_server(conn.info.parameter_status)
        options = self._option_args()
        if found is not assumed and found.startup_options(**options) != assumed.startup_options(**options):
            # Learnt only now (a postgresql:// URL reaching CockroachDB): reopen once, with the
            # engine's own startup options, which the other engine might refuse.
            conn.close()
            conn = self._open(found)
        try:
            found.check_version(conn.info.parameter_status)
        except InvalidInput:
            conn.close()
            raise
        isolation = isolation_of(found)
        if isolation is not None:
            conn.isolation_level = isolation
        self._engine = found
        self._conn = conn
        try:
            for name in self._listening:  # a LISTEN lives and dies with its connection
                conn.execute(self._query(name))
        except psycopg.Error as exc:
            self._discard()
            raise _translate(exc, self.dsn) from exc
        return conn

    def _option_args(self) -> dict[str, Any]:
        return {"statement_timeout_ms": self.statement_timeout_ms, "internals": self.internals}

    def _open(self, engine: Engine) -> psycopg.Connection[Any]:
        arguments = connect_arguments(self.dsn, engine, application_name=self.application_name, **self._option_args())
        try:
            return psycopg.connect(self.dsn.conninfo, **arguments)
        except psycopg.Error as exc:
            raise _translate(exc, self.dsn) from exc

    def _discard(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
        self._conn = None

    def _drop_broken(self) -> None:
        """Drop a connection an error left closed or broken (:func:`shardq.sessions.rules.discard_if_broken`)."""
        self._discard()

    def close(self) -> None:
        self._listening.clear()
        self._discard()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def engine(self) -> Engine:
        """The database engine behind this session (:mod:`shardq.engine`): named by the URL, or
        detected from the server on first connect."""
        if self._engine is None:
            self.connection()
        assert self._engine is not None
        return self._engine

    @property
    def engine_name(self) -> str:
        """The engine's name, for reports (``"postgresql"`` or ``"cockroachdb"``)."""
        return self.engine.name

    @property
    def dialect(self) -> str:
        """:attr:`engine_name` under its former name, kept for existing code (not SQLAlchemy's
        dialect: docs/glossary.md, "engine")."""
        return self.engine.name

    @property
    def max_retries(self) -> int:
        """Retries after a 40001: as given, else the engine's policy."""
        if self._max_retries is not None:
            return self._max_retries
        return (self._engine or POSTGRESQL).retry.serialization_retries

    def sibling(self, **changes: Any) -> Session:
        """A new session to the same database with the same options, except ``changes``
        (``application_name``, ``statement_timeout_ms``, ``internals``, ``max_retries``)."""
        options: dict[str, Any] = {
            "application_name": self.application_name,
            "max_retries": self._max_retries,
            "statement_timeout_ms": self.statement_timeout_ms,
            "internals": self.internals,
        }
        options.update(changes)
        return Session(self.dsn, **options)

    @property
    def server_version(self) -> int:
        return self.connection().info.server_version

    def parameter_status(self, name: str) -> str | None:
        """A server parameter reported at connect time (e.g. CockroachDB's ``crdb_version``)."""
        return self.connection().info.parameter_status(name)

    def set_shard_column(self, column: str | None) -> None:
        if column != self._shard_column:
            self._shard_column = column
            self._composed.clear()

    # -- plans --------------------------------------------------------------------------------
    def run(self, plan: Plan[T]) -> T:
        """Run ``plan`` (:mod:`shardq.sql.plan`) on this session and return its result. Each request
        is served in turn; a shardq error a request raises is thrown into the plan at its
        ``yield``."""
        value: Any = None
        error: ShardqError | None = None
        while True:
            try:
                request = plan.send(value) if error is None else plan.throw(error)
            except StopIteration as stop:
                return stop.value
            error = None
            try:
                value = _serve(self, request)
            except ShardqError as exc:
                value, error = None, exc

    # -- statements ---------------------------------------------------------------------------
    def _query(self, name: str, identifiers: Mapping[str, str] | None = None) -> Any:
        if identifiers:
            # Caller-named identifiers (e.g. a per-run staging table) change from call to call:
            # compose every time rather than grow the cache.
            return self._compose(name, identifiers)
        key = (name, self._shard_column)
        query = self._composed.get(key)
        if query is None:
            query = self._compose(name, {})
            self._composed[key] = query
        return query

    def _compose(self, name: str, identifiers: Mapping[str, str]) -> Any:
        return compose_statement(self.engine, name, self._shard_column, identifiers)

    def _run(
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
                conn = self.connection()
                if self.before_statement is not None:
                    self.before_statement(name)
                with conn.cursor(binary=binary, row_factory=tuple_row if tuples else dict_row) as cur:
                    cur.execute(self._query(name, identifiers), params or {})
                    return cur.fetchall() if fetch and cur.description is not None else []
            except psycopg.Error as exc:
                if resend_after(
                    exc,
                    name=name,
                    attempt=attempt,
                    max_retries=self.max_retries,
                    in_transaction=self._in_transaction,
                    resend_ambiguous=resend_ambiguous,
                ):
                    time.sleep(retry_pause(attempt, policy=self.engine.retry))
                    continue
                raise discard_if_broken(self, exc, name) from exc

    def fetch_all(
        self,
        name: str,
        params: Mapping[str, Any] | None = None,
        *,
        resend_ambiguous: bool = False,
        identifiers: Mapping[str, str] | None = None,
        binary: bool = False,
        tuples: bool = False,
    ) -> list[Any]:
        """Run the named statement and return its rows as dicts (retrying 40001; re-sending after
        40003 only with ``resend_ambiguous``, for statements that are safe to repeat).

        ``identifiers`` fills the statement's ``{slot}`` placeholders (other than the session's
        ``{shard_col}``) with quoted identifiers, e.g. ``{"stage": "shardq_stage_…"}``. With
        ``binary`` the server sends results in its binary format: the same Python values, about
        half the client CPU to decode (the claim, which returns a whole batch, uses it). With
        ``tuples`` rows come back as tuples in the statement's column order instead of dicts (no
        dict built per row: for the claim, whose rows become objects at once)."""
        return self._run(name, params, True, resend_ambiguous, identifiers, binary, tuples)

    def fetch_one(
        self, name: str, params: Mapping[str, Any] | None = None, *, identifiers: Mapping[str, str] | None = None
    ) -> dict[str, Any] | None:
        rows = self._run(name, params, True, identifiers=identifiers)
        return rows[0] if rows else None

    def fetch_row(
        self, name: str, params: Mapping[str, Any] | None = None, *, identifiers: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """Like :meth:`fetch_one`, for a statement that always returns a row: none is an error."""
        row = self.fetch_one(name, params, identifiers=identifiers)
        if row is None:
            raise DatabaseError(f"statement {name} returned no row")
        return row

    def execute(
        self, name: str, params: Mapping[str, Any] | None = None, *, identifiers: Mapping[str, str] | None = None
    ) -> None:
        self._run(name, params, False, identifiers=identifiers)

    def listen(self, name: str) -> None:
        """Run the named ``LISTEN`` statement now, and again on every connection this session
        opens later (after a lost connection), until :meth:`close`."""
        if name not in self._listening:
            self._listening.append(name)
        self._run(name, None, fetch=False)

    def notifications(self, timeout: float) -> list[str]:
        """Payloads of notifications received on this session's connection (a LISTEN must be
        active): every one already received, at once; else the first to arrive within
        ``timeout`` seconds; else an empty list. Notifications that arrive while other statements
        run are kept until this is called."""
        try:
            conn = self.connection()
            return [n.payload for n in conn.notifies(timeout=max(0.0, timeout), stop_after=1)]
        except psycopg.Error as exc:
            raise discard_if_broken(self, exc) from exc

    @contextmanager
    def _transaction_block(self) -> Iterator[None]:
        conn = self.connection()
        # Opened inside another (a savepoint), it restores the outer one's mark when it ends.
        outer, self._in_transaction = self._in_transaction, True
        try:
            with conn.transaction():
                yield
        finally:
            self._in_transaction = outer

    def transaction(self, body: Callable[[Session], T]) -> T:
        """Run ``body(self)`` inside one transaction, retrying the whole body on 40001.

        ``body`` may therefore run more than once: it must have no side effects other than
        writes through this session.
        """
        attempt = 0
        while True:
            attempt += 1
            try:
                with self._transaction_block():
                    return body(self)
            except SerializationConflict as exc:
                if attempt > self.max_retries:
                    raise
                time.sleep(retry_pause(attempt, policy=self.engine.retry))
                log.debug("transaction hit 40001 (attempt %d): %s", attempt, exc)
            except psycopg.Error as exc:
                if isinstance(exc, pgerrors.SerializationFailure) and attempt <= self.max_retries:
                    time.sleep(retry_pause(attempt, policy=self.engine.retry))
                    continue
                raise discard_if_broken(self, exc) from exc

    # -- outside the named-statement path: rolled-back transactions, EXPLAIN, DDL, raw SQL, COPY --
    def rolled_back(self, body: Callable[[Session], T]) -> T:
        """Run ``body(self)`` inside one transaction that is always rolled back, whatever it
        did: for checks that must never change the database (``shardq doctor``). Not retried."""
        conn = self.connection()
        outer, self._in_transaction = self._in_transaction, True  # see _transaction_block
        try:
            with conn.transaction(force_rollback=True):
                return body(self)
        except psycopg.Error as exc:
            raise discard_if_broken(self, exc) from exc
        finally:
            self._in_transaction = outer

    def explain(self, name: str, params: Mapping[str, Any] | None = None) -> str:
        """The engine's EXPLAIN output for a named statement with these values, as text (one line
        per row the server returned), for query-plan checks: see
        :meth:`shardq.engine.Engine.explain_reads_whole_table`."""
        engine = self.engine
        query = self._query(name)
        try:
            conn = self.connection()
            text = query if isinstance(query, str) else query.as_string(conn)
            explain, values = engine.explain_query(
                text, params or {}, lambda text, values: psycopg.ClientCursor(conn).mogrify(text, values)
            )
            rows = conn.execute(explain, values).fetchall()
        except psycopg.Error as exc:
            raise discard_if_broken(self, exc) from exc
        lines = (next(iter(row.values())) for row in rows)
        # A JSON plan arrives decoded; hand it back as the JSON text the server wrote.
        return "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines)

    def execute_ddl(
        self,
        name: str,
        *,
        identifiers: Mapping[str, str] | None = None,
        literals: Mapping[str, int] | None = None,
    ) -> None:
        """Run a named DDL statement whose ``{slots}`` take identifiers or integer literals.

        DDL takes no bind parameters (neither database plans a utility statement with them), so
        this is the one place a value enters SQL text: only ``int`` values, rendered by
        ``psycopg.sql.Literal``; names go through ``psycopg.sql.Identifier``. No 40001 retry here:
        CockroachDB retries an autocommit schema change itself, and inside
        :meth:`transaction` the body is retried as a whole.
        """
        slots: dict[str, Any] = {k: sql.Identifier(v) for k, v in (identifiers or {}).items()}
        for key, value in (literals or {}).items():
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidInput(f"DDL literal {key} must be a whole number")
            slots[key] = sql.Literal(value)
        statement = self.engine.statements()[name]
        self.execute_raw(sql.SQL(statement.text).format(**slots))

    def execute_raw(self, query: Any, params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Run SQL that is not a named statement: DDL composed with ``psycopg.sql`` (migrations,
        resizing, Spark staging) or admin probes. Same error translation; no 40001 retry."""
        try:
            with self.connection().cursor(row_factory=dict_row) as cur:
                cur.execute(query, params)
                return cur.fetchall() if cur.description is not None else []
        except psycopg.Error as exc:
            raise discard_if_broken(self, exc) from exc

    def copy_in(self, name: str, data: memoryview | list[Any], identifiers: Mapping[str, str] | None = None) -> None:
        """``COPY … FROM STDIN`` of the named statement with ``data`` (bytes, or a list of them),
        on this session's connection, in its transaction (errors are translated by
        :meth:`transaction`)."""
        conn = self.connection()
        with conn.cursor() as cur, cur.copy(self._query(name, identifiers)) as copy:
            step = 1 << 20
            for part in data if isinstance(data, list) else [data]:
                view = memoryview(part)
                for start in range(0, len(view), step):
                    copy.write(view[start : start + step])


def _serve(session: Session, request: Any) -> Any:
    if isinstance(request, Call):
        if request.rows == "all":
            return session.fetch_all(
                request.name,
                request.params,
                resend_ambiguous=request.resend_ambiguous,
                identifiers=request.identifiers,
                binary=request.binary,
                tuples=request.tuples,
            )
        if request.rows == "one":
            return session.fetch_one(request.name, request.params, identifiers=request.identifiers)
        session.execute(request.name, request.params, identifiers=request.identifiers)
        return None
    if isinstance(request, SchemaChange):
        return session.execute_ddl(request.name, identifiers=request.identifiers, literals=request.literals)
    if isinstance(request, CopyIn):
        return session.copy_in(request.name, request.data, request.identifiers)
    if isinstance(request, Atomically):
        body = request.body
        return session.transaction(lambda s: s.run(body()))
    if isinstance(request, UseShardColumn):
        session.set_shard_column(request.column)
        return None
    if isinstance(request, WithInternals):
        if session.internals:
            return session.run(request.body())
        with session.sibling(internals=True) as internal:
            return internal.run(request.body())
    return session.engine
