"""Apply and revert shardq's schema with Alembic (the only place tables are created or changed).

``upgrade`` is idempotent: an up-to-date database is left alone. ``buckets`` only matters when
the tasks table is first created; on an existing table it is reported as ignored and
``shardq buckets resize`` is the way to change the count."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shardq import validation
from shardq.engine.base import Engine
from shardq.sessions.dsn import Dsn
from shardq.sessions.session import Session
from shardq.sql.plan import Call, single

if TYPE_CHECKING:
    import sqlalchemy
from shardq.errors import DatabaseError, InvalidInput


@dataclass(frozen=True)
class MigrationResult:
    before: str | None
    after: str | None
    #: the engine's name ("postgresql" or "cockroachdb"): a public field (and JSON key) named before
    #: "engine name" was the word (docs/glossary.md, "engine")
    dialect: str
    buckets: int
    buckets_ignored: bool = False

    @property
    def changed(self) -> bool:
        return self.before != self.after


def _script_location() -> str:
    import shardq.migrations

    return str(Path(shardq.migrations.__file__).parent)


def _sqlalchemy_engine(dsn: Dsn, engine: Engine) -> sqlalchemy.engine.Engine:
    import sqlalchemy

    from shardq.sessions.rules import raw_connect

    options: dict[str, Any] = {}
    if engine.sqlalchemy_dialect_module is not None:
        try:
            importlib.import_module(engine.sqlalchemy_dialect_module)  # registers the dialect
        except ImportError:
            raise InvalidInput(
                f"migrating {engine.name} needs its SQLAlchemy dialect: pip install 'shardq[cockroach]'"
            ) from None
    if not engine.ddl.transactional:
        # Schema changes run atomically only one statement at a time: each commits alone.
        options["isolation_level"] = "AUTOCOMMIT"
    url = f"{engine.sqlalchemy_dialect}+psycopg://"
    return sqlalchemy.create_engine(
        url, creator=lambda: raw_connect(dsn), poolclass=sqlalchemy.pool.NullPool, **options
    )


def _run(dsn: Dsn, action: str, target: str, buckets: int) -> MigrationResult:
    from alembic import command
    from alembic.config import Config
    from alembic.runtime.migration import MigrationContext

    with Session(dsn) as probe:
        engine = probe.engine
        existing = probe.run(single(Call("schema_tasks_table_present")))
    sa_engine = _sqlalchemy_engine(dsn, engine)
    try:
        with sa_engine.connect() as connection:
            before = MigrationContext.configure(connection).get_current_revision()
            config = Config()
            config.set_main_option("script_location", _script_location())
            config.attributes["connection"] = connection
            config.attributes["buckets"] = buckets
            if action == "upgrade":
                command.upgrade(config, target)
            else:
                command.downgrade(config, target)
            connection.commit()
            after = MigrationContext.configure(connection).get_current_revision()
    except DatabaseError:
        raise
    except Exception as exc:  # alembic/SQLAlchemy wrap driver errors in their own types
        raise DatabaseError(f"migration failed: {str(exc).splitlines()[0]}") from exc
    finally:
        sa_engine.dispose()
    return MigrationResult(before, after, engine.name, buckets, buckets_ignored=bool(existing) and action == "upgrade")


def upgrade(dsn: Dsn, *, buckets: int = 16, target: str = "head") -> MigrationResult:
    """Bring the schema to ``target`` (default: the newest revision)."""
    validation.bucket_count(buckets)
    return _run(dsn, "upgrade", target, buckets)


def downgrade(dsn: Dsn, *, target: str = "base") -> MigrationResult:
    """Revert the schema to ``target`` (default: nothing; every shardq table is dropped)."""
    return _run(dsn, "downgrade", target, 16)


def head_revision() -> str:
    """The newest migration revision this shardq ships (what ``upgrade`` brings a database to)."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", _script_location())
    head = ScriptDirectory.from_config(config).get_current_head()
    assert head is not None
    return head
