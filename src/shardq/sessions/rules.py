"""The rules both sessions (:class:`shardq.sessions.session.Session`, :class:`shardq.sessions.session_async.AsyncSession`)
follow, written once: connect arguments and isolation per engine, statement composition, the
40001/40003 retry rules, and error translation, with the one way a session gives up on a psycopg
error (:func:`discard_if_broken`: drop a connection the error broke, then translate).

Guarantees
    * Every ``psycopg.Error`` leaving a session is a :class:`shardq.errors.DatabaseError`
      subclass with the original as ``__cause__``; the DSN's password never appears in a message.
    * Statements run in autocommit, one statement per round trip, unless run through
      :meth:`shardq.sessions.session.Session.transaction`.
    * SQLSTATE 40001 (serialization failure: CockroachDB's ``restart transaction``, PostgreSQL's
      serializable conflicts) is retried with exponential backoff and full jitter, at most
      ``max_retries`` times (default: the engine's :class:`~shardq.engine.RetryPolicy`), then raised as :class:`SerializationConflict`. A statement outside a
      transaction is re-sent alone; inside a transaction the whole body is re-run
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
    key is not re-sent either (it could insert twice); the caller sees :class:`AmbiguousResult`."""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from typing import Any, Protocol

import psycopg
from psycopg import errors as pgerrors
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from shardq.engine.base import Engine, RetryPolicy
from shardq.errors import (
    AmbiguousResult,
    DatabaseError,
    DatabaseUnavailable,
    LockTimeout,
    NotMigrated,
    SerializationConflict,
    ShardLayoutChanged,
    StatementTimeout,
)
from shardq.sessions.dsn import Dsn, redact_text

log = logging.getLogger("shardq.sessions.session")


_DEFAULT_RETRY = RetryPolicy()


RETRY_LIMIT_DEFAULT = _DEFAULT_RETRY.serialization_retries


def _translate(exc: psycopg.Error, dsn: Dsn) -> DatabaseError:
    message = redact_text(str(exc), dsn.conninfo).strip()
    message = message.splitlines()[0] if message else type(exc).__name__
    password = dsn.password()
    if password:
        message = message.replace(password, "***")
    if isinstance(exc, pgerrors.UndefinedTable):
        return NotMigrated(f"{NotMigrated.__doc__} ({message})")
    if isinstance(exc, pgerrors.SerializationFailure):
        return SerializationConflict(message)
    if isinstance(exc, pgerrors.LockNotAvailable):
        return LockTimeout(message)
    if getattr(exc, "sqlstate", None) == "40003":
        return AmbiguousResult(message)
    if isinstance(exc, pgerrors.QueryCanceled):
        return StatementTimeout(message)
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)) and not isinstance(
        exc, pgerrors.QueryCanceled
    ):
        return DatabaseUnavailable(message)
    return DatabaseError(message)


def retry_pause(attempt: int, rng: random.Random | None = None, policy: RetryPolicy = _DEFAULT_RETRY) -> float:
    """Full-jitter backoff before retry ``attempt`` (1-based) of a 40001."""
    ceiling = min(policy.cap_seconds, policy.base_seconds * (2 ** min(attempt, 20)))
    return (rng or random).uniform(0.0, ceiling)


def connect_arguments(
    dsn: Dsn, engine: Engine, *, application_name: str, statement_timeout_ms: int | None, internals: bool
) -> dict[str, Any]:
    """The keyword arguments of ``psycopg.connect`` / ``psycopg.AsyncConnection.connect`` for a
    session to ``engine``: autocommit, dict rows, the application name, and the engine's startup
    options after any ``options`` the DSN carries. Shared by the sync and the asyncio session."""
    settings = engine.startup_options(statement_timeout_ms=statement_timeout_ms, internals=internals)
    given = conninfo_to_dict(dsn.conninfo).get("options")
    options = " ".join(([str(given)] if given else []) + settings)
    return {"autocommit": True, "row_factory": dict_row, "application_name": application_name, "options": options}


def isolation_of(engine: Engine) -> psycopg.IsolationLevel | None:
    """The psycopg isolation level explicit transactions are pinned to on ``engine`` (psycopg then
    opens each with ``BEGIN ISOLATION LEVEL …``), or None for the server's default."""
    if engine.transaction_isolation is None:
        return None
    return psycopg.IsolationLevel[engine.transaction_isolation.replace(" ", "_")]


def compose_statement(engine: Engine, name: str, shard_column: str | None, identifiers: Mapping[str, str]) -> Any:
    """The named statement of ``engine`` ready to send: its text, or its ``{slots}`` filled with
    quoted identifiers (``{shard_col}`` from ``shard_column``, the others from ``identifiers``)."""
    statement = engine.statements()[name]
    if not statement.templated:
        return statement.text
    names = dict(identifiers)
    if "shard_col" in statement.slots:
        if shard_column is None:
            raise DatabaseError(f"statement {name} needs the shard layout, which is not discovered yet")
        names["shard_col"] = shard_column
    missing = statement.slots - names.keys()
    if missing:
        raise DatabaseError(f"statement {name} needs identifiers {sorted(missing)}")
    return sql.SQL(statement.text).format(**{slot: sql.Identifier(names[slot]) for slot in statement.slots})


def resend_after(
    exc: psycopg.Error, *, name: str, attempt: int, max_retries: int, in_transaction: bool, resend_ambiguous: bool
) -> bool:
    """Whether a statement that failed with ``exc`` on attempt ``attempt`` is sent again (after
    :func:`retry_pause`): a 40001 outside a transaction, a 40003 of a statement marked
    ``resend_ambiguous`` outside a transaction, each at most ``max_retries`` times. See the module
    documentation; shared by the sync and the asyncio session."""
    if in_transaction or attempt > max_retries:
        return False
    if isinstance(exc, pgerrors.SerializationFailure):
        log.debug("statement %s hit 40001 (attempt %d); retrying", name, attempt)
        return True
    if isinstance(exc, pgerrors.StatementCompletionUnknown) and resend_ambiguous:
        # 40003: see "Why the lease token makes re-sent acks safe" in the module docstring.
        log.warning("statement %s: result ambiguous (40003); re-sending the fenced statement", name)
        return True
    return False


def statement_error(
    exc: psycopg.Error, dsn: Dsn, engine: Engine | None, name: str, shard_column: str | None
) -> DatabaseError:
    """The shardq error for a named statement that failed with ``exc``: a missing shard column
    the session filters on means a resize dropped it (:class:`ShardLayoutChanged`); any other
    missing column (42703) of a named statement means the tables are older than this shardq's
    statements (:class:`NotMigrated`), as a missing table (42P01) does. The second also happens
    for a few seconds after ``migrate`` added a column, to a CockroachDB read ``AS OF SYSTEM
    TIME`` a moment before it (the historical descriptor lacks the column): readers that fall
    back to a current read on :class:`NotMigrated` thus cover both. Anything else is translated
    as everywhere (:func:`_translate`)."""
    if (
        isinstance(exc, pgerrors.UndefinedColumn)
        and shard_column is not None
        and engine is not None
        and "shard_col" in engine.statements()[name].slots
    ):
        return ShardLayoutChanged(f"{name}: shard column {shard_column} no longer exists; re-discover the layout")
    if isinstance(exc, pgerrors.UndefinedColumn):
        message = _translate(exc, dsn)
        return NotMigrated(f"{NotMigrated.__doc__} ({name}: {message})")
    return _translate(exc, dsn)


class HoldsConnection(Protocol):
    """What :func:`discard_if_broken` reads of a session: the sync or the asyncio one."""

    dsn: Dsn

    @property
    def _conn(self) -> psycopg.Connection[Any] | psycopg.AsyncConnection[Any] | None: ...

    @property
    def _engine(self) -> Engine | None: ...

    @property
    def _shard_column(self) -> str | None: ...

    def _drop_broken(self) -> None: ...


def discard_if_broken(session: HoldsConnection, exc: psycopg.Error, statement: str | None = None) -> DatabaseError:
    """The shardq error to raise for ``exc``, a psycopg error ``session`` does not retry: if it left
    the session's connection closed or broken, the connection is dropped first, so the session's
    next call opens a new one (a borrowed session never drops the caller's connection); then
    ``exc`` is translated, as :func:`statement_error` for the named ``statement`` or as every
    other error otherwise. Both sessions' every give-up path goes through here:
    ``raise discard_if_broken(self, exc) from exc``.

    Dropping is synchronous on both sessions: a closed or broken connection has nothing left to
    say to its server (psycopg's ``close`` of one returns at once), so the asyncio session drops
    it without awaiting."""
    conn = session._conn
    if conn is not None and (conn.closed or conn.broken):
        session._drop_broken()
    if statement is None:
        return _translate(exc, session.dsn)
    return statement_error(exc, session.dsn, session._engine, statement, session._shard_column)


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
