"""The one gateway to the database: connections, statement execution, retries, error translation.

Only this module, its asyncio twin :mod:`shardq.db_async` (which reuses the helpers here:
:func:`connect_arguments`, :func:`isolation_of`, :func:`compose_statement`, :func:`resend_after`,
:func:`statement_error`, :func:`retry_pause`) and :mod:`shardq.queries` (which reads SQL text)
touch psycopg. Everything else calls :class:`Session` methods with a statement *name* and a dict
of bind values, or runs a plan (:mod:`shardq.plans`), and gets dict rows or shardq errors back.

Guarantees
    * Every ``psycopg.Error`` leaving a :class:`Session` is a :class:`shardq.errors.DatabaseError`
      subclass with the original as ``__cause__``; the DSN's password never appears in a message.
    * Statements run in autocommit, one statement per round trip, unless run through
      :meth:`Session.transaction`.
    * SQLSTATE 40001 (serialization failure: CockroachDB's ``restart transaction``, PostgreSQL's
      serializable conflicts) is retried with exponential backoff and full jitter, at most
      ``max_retries`` times (default: the engine's :class:`~shardq.engine.RetryPolicy`), then raised as :class:`SerializationConflict`. A statement outside a
      transaction is re-sent alone; inside :meth:`Session.transaction` the whole body is re-run
      (CockroachDB aborts the transaction, so re-sending one statement would be wrong). Every shardq
      statement is safe to re-run after a 40001: the failed attempt changed nothing.
    * SQLSTATE 40003 (CockroachDB: "result is ambiguous", only possible on a statement outside a
      transaction or on COMMIT) means the statement may or may not have committed. It is re-sent
      only for statements the caller marks ``resend_ambiguous`` (the lease-fenced ones, see below);
      otherwise it surfaces as :class:`AmbiguousResult`.
    * A statement the server cancels (``statement_timeout_ms``, or an operator's cancel) raises
      :class:`StatementTimeout`; it changed nothing.

Why the lease token makes re-sent acks (and lost claims) safe
    A claim writes a fresh random ``lease_token`` into every row it leases and hands the token to
    the worker. Ack, retry, dead-letter, release and extend name each row by its whole key *and*
    that token (``… AND t.lease_token = k.token AND t.state = 'leased'``), and all but extend
    change the row so that it stops matching: ack and dead-letter delete it, retry and release set
    ``state = 'ready'`` and clear the token (on CockroachDB they also rewrite the key). So when the
    first attempt did commit, the re-sent statement matches no row and changes nothing; the ids
    missing from its result are counted as ``lease_lost``, which is harmless. A re-sent extend
    matches again and sets the expiry to now + lease once more: what was asked for. If the lease
    expired and another consumer claimed the task meanwhile, that claim wrote a different token,
    so no re-send can touch the new holder's lease.

    A claim is *not* re-sent after 40003: it would lease another batch under another token. The
    consumer treats the ambiguous claim as empty. If it did commit, its tasks stay leased under a
    token nobody holds until ``lease_expires_at``; the reaper then returns them to ``ready`` (the
    attempt counts), so nothing is lost and nothing runs twice at once. An enqueue without a dedupe
    key is not re-sent either (it could insert twice); the caller sees :class:`AmbiguousResult`.

Engines
    What differs between PostgreSQL and CockroachDB is asked of :attr:`Session.engine`
    (:mod:`shardq.engine`): the statements sent, the startup options every connection carries, the
    isolation level explicit transactions are pinned to, the retry policy and the supported
    versions. A ``cockroachdb://`` URL names the engine up front; a ``postgresql://`` URL learns it
    from the server at the first connect (and reopens once with the engine's own options if they
    differ). A server older than the engine supports is refused with
    :class:`~shardq.errors.UnsupportedServer`.

Does not
    * pool connections: each worker thread or service owns its session;
    * reconnect silently in the middle of a transaction. After a lost connection the next call
      opens a new one; the call that saw the loss raises :class:`DatabaseUnavailable`.
"""

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

from .dsn import CONNECT_TIMEOUT_SECONDS, LIBPQ_URL_SCHEMES, Dsn, redact_text
from .engine import POSTGRESQL, Engine, engine_for_server
from .errors import (
    DatabaseError,
    InvalidInput,
    SerializationConflict,
    ShardqError,
)
from .gateway import (
    RETRY_LIMIT_DEFAULT,
    _translate,
    compose_statement,
    connect_arguments,
    isolation_of,
    resend_after,
    retry_pause,
    statement_error,
)
from .plans import Atomically, Call, Plan, SchemaChange, UseShardColumn, WithInternals

log = logging.getLogger("shardq.db")

__all__ = [
    "CONNECT_TIMEOUT_SECONDS", "LIBPQ_URL_SCHEMES", "RETRY_LIMIT_DEFAULT", "Dsn", "Session", "_translate",
    "compose", "compose_statement", "connect_arguments", "identifier", "isolation_of", "raw_connect", "redact_text",
    "resend_after", "retry_pause", "statement_error",
]

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
    def _connection(self) -> psycopg.Connection[Any]:
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
        arguments = connect_arguments(self.dsn, engine, application_name=self.application_name,
                                      **self._option_args())
        try:
            return psycopg.connect(self.dsn.conninfo, **arguments)
        except psycopg.Error as exc:
            raise _translate(exc, self.dsn) from exc

    def _discard(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
        self._conn = None

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
            self._connection()
        assert self._engine is not None
        return self._engine

    @property
    def dialect(self) -> str:
        """The engine's name, for reports (``"postgresql"`` or ``"cockroachdb"``)."""
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
            "application_name": self.application_name, "max_retries": self._max_retries,
            "statement_timeout_ms": self.statement_timeout_ms, "internals": self.internals,
        }
        options.update(changes)
        return Session(self.dsn, **options)

    @property
    def server_version(self) -> int:
        return self._connection().info.server_version

    def parameter_status(self, name: str) -> str | None:
        """A server parameter reported at connect time (e.g. CockroachDB's ``crdb_version``)."""
        return self._connection().info.parameter_status(name)

    def set_shard_column(self, column: str | None) -> None:
        if column != self._shard_column:
            self._shard_column = column
            self._composed.clear()

    # -- plans --------------------------------------------------------------------------------
    def run(self, plan: Plan[T]) -> T:
        """Run ``plan`` (:mod:`shardq.plans`) on this session and return its result. Each request
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
                conn = self._connection()
                if self.before_statement is not None:
                    self.before_statement(name)
                with conn.cursor(binary=binary, row_factory=tuple_row if tuples else dict_row) as cur:
                    cur.execute(self._query(name, identifiers), params or {})
                    return cur.fetchall() if fetch and cur.description is not None else []
            except psycopg.Error as exc:
                if resend_after(exc, name=name, attempt=attempt, max_retries=self.max_retries,
                                in_transaction=self._in_transaction, resend_ambiguous=resend_ambiguous):
                    time.sleep(retry_pause(attempt, policy=self.engine.retry))
                    continue
                if self._conn is not None and (self._conn.closed or self._conn.broken):
                    self._discard()
                raise statement_error(exc, self.dsn, self._engine, name, self._shard_column) from exc

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
            conn = self._connection()
            return [n.payload for n in conn.notifies(timeout=max(0.0, timeout), stop_after=1)]
        except psycopg.Error as exc:
            if self._conn is not None and (self._conn.closed or self._conn.broken):
                self._discard()
            raise _translate(exc, self.dsn) from exc

    def explain(self, name: str, params: Mapping[str, Any] | None = None) -> str:
        """The engine's EXPLAIN output for a named statement with these values, as text (one line
        per row the server returned), for query-plan checks: see
        :meth:`shardq.engine.Engine.explain_reads_whole_table`."""
        engine = self.engine
        query = self._query(name)
        try:
            conn = self._connection()
            text = query if isinstance(query, str) else query.as_string(conn)
            explain, values = engine.explain_query(
                text, params or {}, lambda text, values: psycopg.ClientCursor(conn).mogrify(text, values))
            rows = conn.execute(explain, values).fetchall()
        except psycopg.Error as exc:
            raise _translate(exc, self.dsn) from exc
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
            with self._connection().cursor(row_factory=dict_row) as cur:
                cur.execute(query, params)
                return cur.fetchall() if cur.description is not None else []
        except psycopg.Error as exc:
            if self._conn is not None and (self._conn.closed or self._conn.broken):
                self._discard()
            raise _translate(exc, self.dsn) from exc

    @contextmanager
    def _transaction_block(self) -> Iterator[None]:
        conn = self._connection()
        self._in_transaction = True
        try:
            with conn.transaction():
                yield
        finally:
            self._in_transaction = False

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
                if self._conn is not None and (self._conn.closed or self._conn.broken):
                    self._discard()
                raise _translate(exc, self.dsn) from exc


def _serve(session: Session, request: Any) -> Any:
    if isinstance(request, Call):
        if request.rows == "all":
            return session.fetch_all(request.name, request.params, resend_ambiguous=request.resend_ambiguous,
                                     identifiers=request.identifiers, binary=request.binary, tuples=request.tuples)
        if request.rows == "one":
            return session.fetch_one(request.name, request.params, identifiers=request.identifiers)
        session.execute(request.name, request.params, identifiers=request.identifiers)
        return None
    if isinstance(request, SchemaChange):
        session.execute_ddl(request.name, identifiers=request.identifiers, literals=request.literals)
        return None
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


def identifier(name: str) -> sql.Identifier:
    """A quoted identifier for composed statements (the only way names enter SQL)."""
    return sql.Identifier(name)


def compose(template: str, **identifiers: str) -> sql.Composed:
    """Fill ``{slot}`` identifier slots of a fixed SQL template."""
    return sql.SQL(template).format(**{k: sql.Identifier(v) for k, v in identifiers.items()})


def raw_connect(dsn: Dsn) -> psycopg.Connection:
    """A plain psycopg connection, for tools that bring their own driver layer (Alembic's
    SQLAlchemy engine). Errors are translated like everywhere else."""
    try:
        return psycopg.connect(dsn.conninfo, application_name="shardq-migrate")
    except psycopg.Error as exc:
        raise _translate(exc, dsn) from exc
