"""shardq's Alembic migrations (``shardq.migrations`` in the installed package)."""

from __future__ import annotations

from shardq.engine import engine_for_sqlalchemy
from shardq.engine.base import Engine


def migration_engine() -> Engine:
    """The shardq engine the running migration targets, from the dialect Alembic runs with (the
    migration context's, so it also answers when the DDL is rendered offline)."""
    from alembic import op

    return engine_for_sqlalchemy(op.get_context().dialect.name)
