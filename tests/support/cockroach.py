"""The CockroachDB test databases: where the cluster is, how each test database is created,
migrated, addressed and emptied. ``tests/conftest.py``'s CockroachDB fixtures are thin wrappers of
these functions, which ``tests/project/test_cockroach_fixtures.py`` runs against the recorded CockroachDB
(``tests/support/recorded_cockroach.py``), so the fixtures' own code runs in ``make test``."""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from collections.abc import Callable

from psycopg.conninfo import make_conninfo

from shardq.errors import DatabaseError
from shardq.migrations import apply as migrate
from shardq.sessions.dsn import Dsn
from shardq.sessions.session import Session
from tests.support.factories import TestDatabase

#: The environment variable naming a root URL of a CockroachDB cluster the tests may write to.
URL_VARIABLE = "SHARDQ_TEST_COCKROACH_URL"
#: Tables emptied between CockroachDB tests that share one migrated database.
SHARDQ_TABLES = (
    "shardq_tasks",
    "shardq_dead",
    "shardq_queues",
    "shardq_stats",
    "shardq_spark_chunks",
    "shardq_spark_runs",
    "shardq_spark_stages",
    "shardq_periodic",
    "shardq_slots",
    "shardq_rate_tokens",
    "shardq_history",
    "shardq_attempts",
    "shardq_listeners",
    "shardq_workflows",
    "shardq_workflow_steps",
    "shardq_workflow_edges",
)
#: The staging tables a Spark run leaves behind when it fails before its merge.
STAGE_TABLES = "SELECT table_name FROM information_schema.tables WHERE table_name LIKE 'shardq_stage_%%'"


def cluster_url() -> str | None:
    """The cluster ``SHARDQ_TEST_COCKROACH_URL`` names (blank counts as unset), or None."""
    return os.environ.get(URL_VARIABLE, "").strip() or None


def database_dsn(root: Dsn, name: str) -> Dsn:
    """The address of database ``name`` on the cluster ``root`` reaches: the same server, user and
    options, and the same engine (``root``'s URL scheme named it, or the server tells at connect).

    The test databases were once addressed as ``Dsn(conninfo, "cockroachdb")``, an engine's *name*
    where :class:`~shardq.sessions.dsn.Dsn` holds the engine itself, and the first connect failed with
    ``AttributeError: 'str' object has no attribute 'startup_options'`` (audit N10)."""
    return dataclasses.replace(root, conninfo=make_conninfo(root.conninfo, dbname=name))


def create_database_when_allowed(
    session: Session,
    name: str,
    *,
    patience: float = 30.0,
    pause: float = 0.5,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """CREATE DATABASE, retried while the user may not yet: the image's entrypoint grants admin to
    its user only after printing the line testcontainers waits for (build/deploy/cockroach.sh,
    audit F8), so the first statement can race the grant and fail with 42501 (CockroachDB's
    "permission denied to create database"). Any other error, or 42501 past ``patience``
    seconds, is raised."""
    deadline = time.monotonic() + patience
    while True:
        try:
            session.execute_raw(f'CREATE DATABASE "{name}"')
            return
        except DatabaseError as exc:
            if getattr(exc.__cause__, "sqlstate", None) != "42501" or time.monotonic() > deadline:
                raise
            sleep(pause)


def fresh_database(
    url: str, *, buckets: int, name: str | None = None, patience: float = 30.0, pause: float = 0.5
) -> TestDatabase:
    """A new database on the cluster at ``url``, migrated with ``buckets`` buckets, opened as a
    :class:`~tests.support.factories.TestDatabase` that drops it when closed."""
    name = name or f"t_{uuid.uuid4().hex[:12]}"
    root = Dsn.parse(url)
    with Session(root) as session:
        create_database_when_allowed(session, name, patience=patience, pause=pause)
    dsn = database_dsn(root, name)
    migrate.upgrade(dsn, buckets=buckets)
    return TestDatabase(dsn, "cockroachdb", drop=(url, name))


def emptied(database: TestDatabase) -> TestDatabase:
    """``database`` without rows, for the next test sharing it: the staging tables a failed Spark
    run left are dropped, every shardq table's rows deleted, and the client opened afresh."""
    for row in database.sql(STAGE_TABLES):
        database.sql(f'DROP TABLE IF EXISTS "{row["table_name"]}"')
    for table in SHARDQ_TABLES:
        database.sql(f"DELETE FROM {table} WHERE true")
    database.client.close()
    database.reopen()
    return database
