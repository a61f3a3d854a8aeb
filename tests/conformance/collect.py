"""Every statement the CockroachDB engine can send, as it is sent.

One function per source, each returning :class:`Sent` items:

* :func:`named_statements`: every named statement of ``sql/common`` + ``sql/cockroachdb`` (the
  engine's :meth:`~shardq.engine.Engine.statements`), its ``{slots}`` composed with
  ``psycopg.sql`` exactly as :class:`shardq.sessions.session.Session` composes them;
* :func:`gateway_statements`: what the gateway itself builds (the ``BEGIN`` psycopg sends for the
  engine's pinned isolation level, the ``EXPLAIN`` prefix);
* :func:`migration_statements`: the migrations' DDL for this engine, rendered offline by Alembic
  (``as_sql``), so every revision's CockroachDB branch is seen without a server;
* :func:`startup_options`: the ``-c name=value`` settings of every kind of session.
"""

from __future__ import annotations

import importlib
import io
import pkgutil
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from shardq.engine import COCKROACHDB
from shardq.engine.base import Engine

#: Example values for identifier slots, shaped like the real ones.
EXAMPLE_IDENTIFIERS = {
    "shard_col": "crdb_internal_exec_time_id_queue_rank_state_shard_16",
    "stage": "shardq_stage_0123456789abcdef",
    "column": "crdb_internal_exec_time_id_queue_rank_state_shard_8",
}
EXAMPLE_LITERALS = {"bucket_count": 16}
#: Revision steps whose statements depend on what the database holds (0002's downgrade drops the
#: staging tables its ledger lists), so they cannot be rendered offline.
NEEDS_A_DATABASE = {("0002_spark_ledger", "downgrade")}


@dataclass(frozen=True)
class Sent:
    """One statement (or startup option) as the engine sends it."""

    origin: str  #: where it comes from, e.g. "sql:task_claim_batch", "migration:0001_initial"
    text: str
    #: The session it runs on opted in to engine internals (``allow_unsafe_internals``).
    internals: bool = False


def _compose(text: str, slots: frozenset[str]) -> str:
    values: dict[str, Any] = {}
    for slot in slots:
        if slot in EXAMPLE_LITERALS:
            values[slot] = sql.Literal(EXAMPLE_LITERALS[slot])
        else:
            values[slot] = sql.Identifier(EXAMPLE_IDENTIFIERS[slot])
    return sql.SQL(text).format(**values).as_string(None) if slots else text


def named_statements(engine: Engine = COCKROACHDB) -> list[Sent]:
    return [
        Sent(f"sql:{name}", _compose(statement.text, statement.slots), name in engine.statements_needing_internals)
        for name, statement in sorted(engine.statements().items())
    ]


def gateway_statements(engine: Engine = COCKROACHDB) -> list[Sent]:
    sent = [Sent("gateway:explain", engine.explain_prefix + "SELECT 1")]
    if engine.transaction_isolation:
        # psycopg's Connection.transaction() with isolation_level set (psycopg/_tpc / BaseConnection._get_tx_start_command)
        sent.append(Sent("gateway:begin", f"BEGIN ISOLATION LEVEL {engine.transaction_isolation}"))
    return sent


def migration_statements(engine: Engine = COCKROACHDB, buckets: int = 16) -> list[Sent]:
    """Each revision's upgrade and downgrade, rendered as SQL for ``engine`` without a database."""
    from alembic.migration import MigrationContext
    from alembic.operations import Operations

    import shardq.migrations
    import shardq.migrations.versions as versions

    sent = []
    for info in sorted(pkgutil.iter_modules(versions.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{versions.__name__}.{info.name}")
        for step in ("upgrade", "downgrade"):
            if (info.name, step) in NEEDS_A_DATABASE:
                continue
            out = io.StringIO()
            # The SQLAlchemy dialect only renders; the engine's own branch is chosen through
            # migration_engine(), pointed at ``engine`` here.
            context = MigrationContext.configure(
                dialect_name="postgresql", opts={"as_sql": True, "output_buffer": out, "literal_binds": True}
            )
            saved = {name: getattr(module, name) for name in ("migration_engine", "_buckets") if hasattr(module, name)}
            try:
                if "migration_engine" in saved:
                    setattr(module, "migration_engine", lambda: engine)  # noqa: B010 - a revision's global
                if "_buckets" in saved:
                    setattr(module, "_buckets", lambda: buckets)  # noqa: B010 - a revision's global
                with Operations.context(context):
                    getattr(module, step)()
            finally:
                for name, value in saved.items():
                    setattr(module, name, value)
            for text in out.getvalue().split(";\n"):
                if text.strip():
                    sent.append(Sent(f"migration:{info.name}:{step}", text.strip()))
    assert hasattr(shardq.migrations, "migration_engine")  # the helper the revisions use exists
    return sent


def startup_options(engine: Engine = COCKROACHDB) -> list[Sent]:
    sent = []
    for internals in (False, True):
        for option in engine.startup_options(statement_timeout_ms=30_000, internals=internals):
            sent.append(Sent(f"startup{'-internals' if internals else ''}", option, internals))
    return sent


def everything(engine: Engine = COCKROACHDB) -> list[Sent]:
    """Every SQL statement (not the startup options) the engine can send."""
    return named_statements(engine) + gateway_statements(engine) + migration_statements(engine)
