"""The engine seam: everything PostgreSQL and CockroachDB do differently, in one package.

:class:`Engine` (in :mod:`.base`) is the interface: connection facts and operations written as
plans. :mod:`.postgresql` and :mod:`.cockroachdb` implement it, their operations in
:mod:`.postgresql_ops` and :mod:`.cockroachdb_ops` beside ``sql/<engine>/``. A
:class:`~shardq.sessions.session.Session` finds its engine from the URL scheme or from what the server reports
at connect; every other module calls the operations of ``session.engine`` (or ``store.engine``)
and never asks which engine it is. The package runs nothing and imports no session. To add an
engine: subclass :class:`Engine`, add its ``sql/<name>/`` folder, list an instance in
:data:`ENGINES` before the fallback (PostgreSQL, which recognises any server), and add its
resize to :mod:`shardq.resize`.
"""

from __future__ import annotations

from shardq.engine.base import CAPABILITIES, Ddl, Engine, ParameterStatus, RetryPolicy
from shardq.engine.cockroachdb import CockroachDBEngine
from shardq.engine.postgresql import PostgreSQLEngine

POSTGRESQL = PostgreSQLEngine()
COCKROACHDB = CockroachDBEngine()

#: Every engine, in the order servers are matched against them (the fallback last).
ENGINES: tuple[Engine, ...] = (COCKROACHDB, POSTGRESQL)

__all__ = [
    "CAPABILITIES",
    "COCKROACHDB",
    "ENGINES",
    "POSTGRESQL",
    "CockroachDBEngine",
    "Ddl",
    "Engine",
    "PostgreSQLEngine",
    "RetryPolicy",
    "engine_for_server",
    "engine_for_sqlalchemy",
    "engine_for_url_scheme",
    "engine_named",
]


def engine_named(name: str) -> Engine:
    """The engine called ``name`` (``"postgresql"``, ``"cockroachdb"``)."""
    for engine in ENGINES:
        if engine.name == name:
            return engine
    raise ValueError(f"unknown engine {name!r}")


def engine_for_url_scheme(scheme: str) -> Engine | None:
    """The engine a URL scheme names up front, or None when only the server can tell
    (``postgresql://`` also reaches CockroachDB)."""
    for engine in ENGINES:
        if scheme in engine.url_schemes:
            return engine
    return None


def engine_for_server(parameter_status: ParameterStatus) -> Engine:
    """The engine of the server a connection reached, from the parameters it reported."""
    for engine in ENGINES:
        if engine.recognises(parameter_status):
            return engine
    return POSTGRESQL


def engine_for_sqlalchemy(dialect_name: str) -> Engine:
    """The engine behind a SQLAlchemy dialect name (what Alembic migrations run with)."""
    for engine in ENGINES:
        if engine.sqlalchemy_dialect == dialect_name:
            return engine
    raise ValueError(f"no shardq engine for the SQLAlchemy dialect {dialect_name!r}")
