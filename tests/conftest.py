"""Test databases: the embedded PostgreSQL always, CockroachDB where one is reachable.

* One embedded PostgreSQL per test session (in a temporary SHARDQ_HOME); a migrated template
  database is built once and each test gets a fresh copy (``CREATE DATABASE … TEMPLATE``), so
  tests never see each other's rows.
* CockroachDB: ``SHARDQ_TEST_COCKROACH_URL`` (a root URL of a cluster that may be written to), or a
  testcontainers CockroachDB when a Docker engine answers: an insecure single node of the image
  ``SHARDQ_TEST_COCKROACH_IMAGE`` names (``oldest``, ``newest`` or an image; see
  ``tests/support/cockroach_container.py``). One database is migrated per test
  session (migrations there are several schema-change jobs each) and emptied before each test;
  tests that change the schema (resizing) get a fresh database of their own (``crdb_db_fresh``).
  The embedded PostgreSQL is not started for CockroachDB tests. Where no CockroachDB exists the
  CockroachDB variants are skipped with that reason.

The ``db`` fixture is parametrised over the available backends, so every behaviour test runs
unchanged against each.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import shardq
from shardq.client import Client
from shardq.migrations import apply as migrate
from shardq.sessions.dsn import Dsn
from shardq.sessions.embedded import EmbeddedServer
from shardq.sessions.session import Session
from tests.support import cockroach as cockroach_support
from tests.support.cli import shardq_cli  # noqa: F401 - the CLI fixture, for the tests of every folder
from tests.support.cockroach_container import SQL_PORT, cockroach_image, insecure_container, root_url
from tests.support.factories import TestDatabase

TEST_BUCKETS = 4


#: ``SHARDQ_TEST_ISOLATION=serializable`` (``make test-serializable``): the embedded PostgreSQL runs
#: every transaction at that level (the isolation CockroachDB runs), so every retry path meets real
#: 40001s; the run reports how many retries this process made.
TEST_ISOLATION = os.environ.get("SHARDQ_TEST_ISOLATION", "").strip().lower() or None
ISOLATION_LEVELS = ("read committed", "repeatable read", "serializable")
_retries = {"count": 0}


def _set_server_isolation(server: EmbeddedServer, level: str) -> None:
    from psycopg import sql

    if level not in ISOLATION_LEVELS:
        raise ValueError(f"SHARDQ_TEST_ISOLATION must be one of {ISOLATION_LEVELS}, not {level!r}")
    with Session(Dsn.parse(server.url("postgres"))) as admin:
        admin.execute_raw(sql.SQL("ALTER SYSTEM SET default_transaction_isolation = {}").format(sql.Literal(level)))
        admin.execute_raw("SELECT pg_reload_conf()")
    with Session(Dsn.parse(server.url("postgres"))) as check:
        found = check.execute_raw("SHOW default_transaction_isolation")[0]["default_transaction_isolation"]
    assert found == level, f"the server runs {found}, not {level}"


@pytest.fixture(scope="session", autouse=True)
def serialization_retries_counted():
    """Counts every retry this process's sessions make after a 40001 (each goes through
    retry_pause), for the summary of a run under SHARDQ_TEST_ISOLATION."""
    if TEST_ISOLATION is None:
        yield
        return
    import shardq.sessions.session
    import shardq.sessions.session_async

    original = shardq.sessions.session.retry_pause

    def counting(*args, **kwargs):
        _retries["count"] += 1
        return original(*args, **kwargs)

    shardq.sessions.session.retry_pause = counting
    shardq.sessions.session_async.retry_pause = counting
    try:
        yield
    finally:
        shardq.sessions.session.retry_pause = original
        shardq.sessions.session_async.retry_pause = original


#: CockroachDB variants taken out of this run, and why (see pytest_collection_modifyitems).
_cockroach_deselected = {"count": 0, "why": ""}


def _cockroach_unavailable() -> str | None:
    """Why the CockroachDB variants cannot run here (the reasons cockroach_root skips with), or None."""
    try:
        import sqlalchemy_cockroachdb  # noqa: F401  (migrations need the dialect)
    except ImportError:
        return "the migration dialect is missing (pip install 'shardq[cockroach]')"
    if cockroach_support.cluster_url():
        return None
    try:
        import docker  # testcontainers' client

        docker.from_env().ping()
    except Exception:  # noqa: BLE001 - no client, no engine, refused: all mean "no Docker here"
        return "no SHARDQ_TEST_COCKROACH_URL and no Docker engine answers"
    return None


def pytest_collection_modifyitems(config, items):
    """Without a CockroachDB, its variants (every test marked ``cockroach``, about 260 in ``make
    test``) are deselected, and the summary says so in one line, instead of one skip line per
    test location. A run that asks for them (``-m cockroach``) still sees each skip."""
    marked = [item for item in items if item.get_closest_marker("cockroach")]
    expression = config.option.markexpr or ""
    if not marked or ("cockroach" in expression and "not cockroach" not in expression):
        return
    why = _cockroach_unavailable()
    if why is None:
        return
    config.hook.pytest_deselected(items=marked)
    items[:] = [item for item in items if not item.get_closest_marker("cockroach")]
    _cockroach_deselected.update(count=len(marked), why=why)


def pytest_terminal_summary(terminalreporter):
    if _cockroach_deselected["count"]:
        terminalreporter.write_line(
            f"shardq: {_cockroach_deselected['count']} CockroachDB tests deselected: {_cockroach_deselected['why']}. "
            "Run them with `make test-cockroach` (starts a CockroachDB in Docker) or against a cluster: "
            "SHARDQ_TEST_COCKROACH_URL=postgresql://root@HOST:26257/defaultdb?sslmode=disable make test"
        )
    if TEST_ISOLATION is not None:
        terminalreporter.write_line(
            f"shardq: PostgreSQL at {TEST_ISOLATION}: {_retries['count']} statement/transaction retries after "
            "40001 in the test process (worker subprocesses not counted)"
        )


@pytest.fixture(scope="session")
def pg_server() -> Iterator[EmbeddedServer]:
    # Not under pytest's basetemp: pytest keeps only the three newest basetemp directories of a user
    # and deletes older ones when a session starts, so a concurrent pytest run (another checkout,
    # another suite) would delete the data directory under this session's running server.
    root = Path(tempfile.mkdtemp(prefix="shardq-test-home-"))
    server = EmbeddedServer(root)
    try:
        server.start()
        if TEST_ISOLATION is not None:
            _set_server_isolation(server, TEST_ISOLATION)
        yield server
        server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_template(pg_server: EmbeddedServer) -> str:
    admin = Dsn.parse(pg_server.url("postgres"))
    with Session(admin) as session:
        session.execute_raw("DROP DATABASE IF EXISTS shardq_template")
        session.execute_raw("CREATE DATABASE shardq_template")
    migrate.upgrade(Dsn.parse(pg_server.url("shardq_template")), buckets=TEST_BUCKETS)
    return "shardq_template"


@pytest.fixture(scope="session")
def cockroach_root() -> Iterator[str]:
    """A root URL of a CockroachDB test cluster, or a skip saying why there is none."""
    try:
        import sqlalchemy_cockroachdb  # noqa: F401  (migrations need the dialect)
    except ImportError:
        pytest.skip("CockroachDB: the migration dialect is missing (pip install 'shardq[cockroach]')")
    url = cockroach_support.cluster_url()
    if url:
        yield url
        return
    try:
        import docker  # testcontainers' client

        docker.from_env().ping()
    except Exception:  # noqa: BLE001 - no client, no engine, refused: all mean "no Docker here"
        pytest.skip("CockroachDB: no SHARDQ_TEST_COCKROACH_URL and no Docker engine answers")
    # An insecure single node of the image SHARDQ_TEST_COCKROACH_IMAGE names, reached as root
    # without TLS (tests/support/cockroach_container.py says why and how).
    with insecure_container(cockroach_image()) as container:
        yield root_url(container.get_container_host_ip(), container.get_exposed_port(SQL_PORT))


def _fresh_postgres(pg_server: EmbeddedServer, pg_template: str) -> TestDatabase:
    name = f"t_{uuid.uuid4().hex[:12]}"
    with Session(Dsn.parse(pg_server.url("postgres"))) as session:
        session.execute_raw(f'CREATE DATABASE "{name}" TEMPLATE {pg_template}')
    return TestDatabase(Dsn.parse(pg_server.url(name)), "postgresql", drop=(pg_server.url("postgres"), name))


@pytest.fixture(scope="session")
def cockroach_shared(cockroach_root: str) -> Iterator[TestDatabase]:
    """One migrated CockroachDB database for the session's tests, emptied before each."""
    database = cockroach_support.fresh_database(cockroach_root, buckets=TEST_BUCKETS)
    yield database
    database.close()


@pytest.fixture(params=["postgresql", pytest.param("cockroachdb", marks=pytest.mark.cockroach)])
def db(request: pytest.FixtureRequest) -> Iterator[TestDatabase]:
    """A migrated database with TEST_BUCKETS buckets and no rows, on each available backend
    (the embedded PostgreSQL starts only for the PostgreSQL variant)."""
    if request.param == "postgresql":
        database = _fresh_postgres(request.getfixturevalue("pg_server"), request.getfixturevalue("pg_template"))
        yield database
        database.close()
    else:
        yield cockroach_support.emptied(request.getfixturevalue("cockroach_shared"))


@pytest.fixture
def app(db: TestDatabase) -> Iterator[shardq.App]:
    """An app on ``db``, with no task declared (a test declares its own), closed after the test."""
    app = shardq.App(db.dsn)
    yield app
    app.close()


@pytest.fixture
def crdb_db(request: pytest.FixtureRequest) -> TestDatabase:
    """A CockroachDB database only, with no rows (CockroachDB-specific plans and retries)."""
    return cockroach_support.emptied(request.getfixturevalue("cockroach_shared"))


@pytest.fixture
def crdb_db_fresh(request: pytest.FixtureRequest) -> Iterator[TestDatabase]:
    """A CockroachDB database of its own, for tests that change the schema (resizing)."""
    database = cockroach_support.fresh_database(request.getfixturevalue("cockroach_root"), buckets=TEST_BUCKETS)
    yield database
    database.close()


@pytest.fixture
def pg_db(pg_server: EmbeddedServer, pg_template: str) -> Iterator[TestDatabase]:
    """A fresh PostgreSQL database only (tests of PostgreSQL-specific plans and layout)."""
    database = _fresh_postgres(pg_server, pg_template)
    yield database
    database.close()


@pytest.fixture
def client(db: TestDatabase) -> Client:
    return db.client


@pytest.fixture(scope="session")
def spark():
    """One local[2,2] SparkSession (two threads, one retry per task) for every Spark test; skips
    when pyspark, Java 17+ or the PostgreSQL JDBC driver is missing."""
    pytest.importorskip("pyspark")
    from shardq.errors import SparkSetupError
    from shardq.spark import find_jdbc_driver
    from shardq.spark import jdbc as jdbc_module

    try:
        jdbc_module.find_java()
        driver = find_jdbc_driver(reachable=lambda: False)
    except SparkSetupError as exc:
        pytest.skip(str(exc))
    session = jdbc_module.spark_session(
        master="local[2,2]",
        driver=driver,
        conf={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"},
    )
    yield session
    session.stop()
