"""What both gateways (:mod:`shardq.db` and :mod:`shardq.db_async`) share: connect arguments and
isolation per engine, statement composition, the 40001/40003 retry rules, and error translation."""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import errors as pgerrors
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from .dsn import Dsn, redact_text
from .engine import Engine, RetryPolicy
from .errors import (
    AmbiguousResult,
    DatabaseError,
    DatabaseUnavailable,
    LockTimeout,
    NotMigrated,
    SerializationConflict,
    ShardLayoutChanged,
    StatementTimeout,
)

log = logging.getLogger("shardq.db")

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


def connect_arguments(dsn: Dsn, engine: Engine, *, application_name: str, statement_timeout_ms: int | None,
                      internals: bool) -> dict[str, Any]:
    """The keyword arguments of ``psycopg.connect`` / ``psycopg.AsyncConnection.connect`` for a
    session to ``engine``: autocommit, dict rows, the application name, and the engine's startup
    options after any ``options`` the DSN carries. Shared by the sync and the asyncio gateway."""
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
    documentation; shared by the sync and the asyncio gateway."""
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


def statement_error(exc: psycopg.Error, dsn: Dsn, engine: Engine | None, name: str,
                    shard_column: str | None) -> DatabaseError:
    """The shardq error for a named statement that failed with ``exc``: a missing shard column
    the session filters on means a resize dropped it (:class:`ShardLayoutChanged`); any other
    missing column (42703) of a named statement means the tables are older than this shardq's
    statements (:class:`NotMigrated`), as a missing table (42P01) does. The second also happens
    for a few seconds after ``migrate`` added a column, to a CockroachDB read ``AS OF SYSTEM
    TIME`` a moment before it (the historical descriptor lacks the column): readers that fall
    back to a current read on :class:`NotMigrated` thus cover both. Anything else is translated
    as everywhere (:func:`_translate`)."""
    if (isinstance(exc, pgerrors.UndefinedColumn) and shard_column is not None and engine is not None
            and "shard_col" in engine.statements()[name].slots):
        return ShardLayoutChanged(f"{name}: shard column {shard_column} no longer exists; re-discover the layout")
    if isinstance(exc, pgerrors.UndefinedColumn):
        message = _translate(exc, dsn)
        return NotMigrated(f"{NotMigrated.__doc__} ({name}: {message})")
    return _translate(exc, dsn)
