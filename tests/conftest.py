"""Test databases: the embedded PostgreSQL always, CockroachDB where one is reachable.

* One embedded PostgreSQL per test session (in a temporary SHARDQ_HOME); a migrated template
  database is built once and each test gets a fresh copy (``CREATE DATABASE … TEMPLATE``), so
  tests never see each other's rows.
* CockroachDB: ``SHARDQ_TEST_COCKROACH_URL`` (a root URL of a cluster that may be written to), or a
  testcontainers CockroachDB when a Docker engine answers. Each test gets its own database there.
  Where neither exists the CockroachDB variants are skipped with that reason.

The ``db`` fixture is parametrised over the available backends, so every behaviour test runs
unchanged against each.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest

from shardq.client import Client
from shardq.db import Dsn, Session
from shardq.embedded import EmbeddedServer
from shardq import migrate

from .factories import TestDatabase

TEST_BUCKETS = 4
# The oldest line shardq supports is 23.1; the container runs a 24.1 patch that testcontainers'
# own tests use.
COCKROACH_IMAGE = "cockroachdb/cockroach:v24.1.1"


@pytest.fixture(scope="session")
def pg_server():
    # Not under pytest's basetemp: pytest keeps only the three newest basetemp directories of a user
    # and deletes older ones when a session starts, so a concurrent pytest run (another checkout,
    # another suite) would delete the data directory under this session's running server.
    root = Path(tempfile.mkdtemp(prefix="shardq-test-home-"))
    server = EmbeddedServer(root)
    try:
        server.start()
        yield server
        server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_template(pg_server) -> str:
    admin = Dsn.parse(pg_server.url("postgres"))
    with Session(admin) as session:
        session.execute_raw("DROP DATABASE IF EXISTS shardq_template")
        session.execute_raw("CREATE DATABASE shardq_template")
    migrate.upgrade(Dsn.parse(pg_server.url("shardq_template")), buckets=TEST_BUCKETS)
    return "shardq_template"


def _cockroach_root_url() -> str | None:
    url = os.environ.get("SHARDQ_TEST_COCKROACH_URL")
    if url:
        return url
    return None


@pytest.fixture(scope="session")
def cockroach_root():
    """A root URL of a CockroachDB test cluster, or a skip saying why there is none."""
    try:
        import sqlalchemy_cockroachdb  # noqa: F401  (migrations need the dialect)
    except ImportError:
        pytest.skip("CockroachDB: the migration dialect is missing (pip install 'shardq[cockroach]')")
    url = _cockroach_root_url()
    if url:
        yield url
        return
    try:
        import docker  # type: ignore  # testcontainers' client

        docker.from_env().ping()
    except Exception:
        pytest.skip("CockroachDB: no SHARDQ_TEST_COCKROACH_URL and no Docker engine answers")
    try:
        # testcontainers >= 4.15 moved the module; the old path still works with a DeprecationWarning.
        from testcontainers.community.cockroachdb import CockroachDBContainer  # type: ignore
    except ImportError:
        from testcontainers.cockroachdb import CockroachDBContainer  # type: ignore
    # The module's defaults start a *secure* node (user cockroach, password arthropod, database
    # roach, sslmode=require): libpq encrypts without verifying the self-signed certificate.
    container = CockroachDBContainer(COCKROACH_IMAGE, dialect="cockroachdb+psycopg")
    with container:
        yield container.get_connection_url().replace("cockroachdb+psycopg://", "cockroachdb://")


def _fresh_postgres(pg_server, pg_template) -> TestDatabase:
    name = f"t_{uuid.uuid4().hex[:12]}"
    with Session(Dsn.parse(pg_server.url("postgres"))) as session:
        session.execute_raw(f'CREATE DATABASE "{name}" TEMPLATE {pg_template}')
    return TestDatabase(Dsn.parse(pg_server.url(name)), "postgresql", drop=(pg_server.url("postgres"), name))


def _fresh_cockroach(root_url: str) -> TestDatabase:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    name = f"t_{uuid.uuid4().hex[:12]}"
    root = Dsn.parse(root_url)
    with Session(root) as session:
        session.execute_raw(f'CREATE DATABASE "{name}"')
    params = conninfo_to_dict(root.conninfo)
    params["dbname"] = name
    dsn = Dsn(make_conninfo(**params), "cockroachdb")
    migrate.upgrade(dsn, buckets=TEST_BUCKETS)
    return TestDatabase(dsn, "cockroachdb", drop=(root_url, name))


@pytest.fixture(params=["postgresql", pytest.param("cockroachdb", marks=pytest.mark.cockroach)])
def db(request, pg_server, pg_template):
    """A freshly migrated database with TEST_BUCKETS buckets, on each available backend."""
    if request.param == "postgresql":
        database = _fresh_postgres(pg_server, pg_template)
    else:
        database = _fresh_cockroach(request.getfixturevalue("cockroach_root"))
    yield database
    database.close()


@pytest.fixture
def crdb_db(request):
    """A fresh CockroachDB database only (CockroachDB-specific plans, retries and resizing)."""
    database = _fresh_cockroach(request.getfixturevalue("cockroach_root"))
    yield database
    database.close()


@pytest.fixture
def pg_db(pg_server, pg_template):
    """A fresh PostgreSQL database only (tests of PostgreSQL-specific plans and layout)."""
    database = _fresh_postgres(pg_server, pg_template)
    yield database
    database.close()


@pytest.fixture
def client(db) -> Client:
    return db.client
