"""The CockroachDB test fixtures' own code (``tests/support/cockroach.py``, which
``tests/conftest.py``'s ``cockroach_root``, ``cockroach_shared``, ``crdb_db`` and ``crdb_db_fresh``
call), run against the recorded CockroachDB so it is proven before a cluster ever runs it.

Answers beyond :mod:`tests.support.recorded_schema`'s:

* ``CREATE DATABASE`` refused to a user without the role option: ``pkg/sql/create_database.go``
  (``pgerror.New(pgcode.InsufficientPrivilege, "permission denied to create database")``),
  ``pgcode.InsufficientPrivilege`` being ``42501`` (``pkg/sql/pgwire/pgcode/codes.go``).
* Command tags ``CREATE DATABASE``, ``DROP DATABASE``, ``DROP TABLE``, ``DELETE <n>``:
  ``StatementTag`` (``pkg/sql/sem/tree/stmt.go``) and ``cookTag`` (``pkg/sql/pgwire``).
"""

from __future__ import annotations

import dataclasses

import pytest

from shardq.engine import COCKROACHDB
from shardq.errors import DatabaseError
from shardq.migrations import apply as migrate
from shardq.sessions.dsn import Dsn
from shardq.sessions.session import Session
from tests.support import cockroach as support
from tests.support.recorded_cockroach import Command, Error, Received, RecordedCockroach, Rows
from tests.support.recorded_schema import RecordedSchema

pytestmark = pytest.mark.recorded

BUCKETS = 4
NAME = "t_0123456789ab"
DENIED = Error("42501", "permission denied to create database")


class Cluster:
    """A recorded cluster holding one database being created, migrated, emptied and dropped."""

    def __init__(self, *, denials: int = 0, stage_tables: tuple[str, ...] = ()) -> None:
        self.denials = denials
        self.stage_tables = list(stage_tables)
        self.schema = RecordedSchema(buckets=BUCKETS, extra=self._extra)
        self.server = RecordedCockroach(self.schema)

    def _extra(self, received: Received):
        text = received.text.strip()
        if text.startswith("CREATE DATABASE"):
            if self.denials:
                self.denials -= 1
                return DENIED
            return Command("CREATE DATABASE")
        if text.startswith("DROP DATABASE"):
            return Command("DROP DATABASE")
        if text == support.STAGE_TABLES.replace("%%", "%"):
            return Rows([("table_name", "TEXT")], [(name,) for name in self.stage_tables])
        if text.startswith("DROP TABLE IF EXISTS"):
            return Command("DROP TABLE")
        if text.startswith("DELETE FROM"):
            return Command("DELETE 0")
        return None

    def __enter__(self) -> Cluster:
        self.server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.__exit__(*exc)

    def texts(self, *, database: str | None = None) -> list[str]:
        return [
            r.text.strip() for r in self.server.received if database is None or r.startup.get("database") == database
        ]


def test_a_fresh_database_is_created_on_the_root_database_then_migrated_and_opened_in_its_own():
    with Cluster() as cluster:
        database = support.fresh_database(cluster.server.url(), buckets=BUCKETS, name=NAME)
        database.client.close()
    assert cluster.texts(database="defaultdb") == [f'CREATE DATABASE "{NAME}"']
    inside = cluster.texts(database=NAME)
    assert inside[0] == "SELECT 1 AS present FROM information_schema.tables WHERE table_name = 'shardq_tasks'"
    assert any("USING HASH WITH (bucket_count = 4)" in text for text in inside)
    assert cluster.schema.version == migrate.head_revision()
    assert (database.layout.bucket_count, database.layout.shard_column) == (
        BUCKETS,
        "crdb_internal_exec_time_id_queue_rank_state_shard_4",
    )
    assert database.dialect == "cockroachdb"


def test_a_test_databases_address_keeps_the_engine_the_root_url_named():
    # Dsn(conninfo, "cockroachdb") put an engine's name where the engine goes: the first connect
    # raised AttributeError ('str' object has no attribute 'startup_options', audit N10).
    with Cluster() as cluster:
        root = Dsn.parse(cluster.server.url())
        dsn = support.database_dsn(root, NAME)
        assert dsn.named_engine is COCKROACHDB
        assert dsn.params()["dbname"] == NAME and dsn.params()["host"] == "127.0.0.1"
        with Session(dsn) as session:
            assert session.execute_raw(support.STAGE_TABLES, {}) == []
            assert session.engine is COCKROACHDB
        broken = dataclasses.replace(dsn, named_engine="cockroachdb")  # type: ignore[arg-type]  # the old one, on purpose
        with pytest.raises(AttributeError, match="startup_options"):
            with Session(broken) as session:
                session.execute_raw("SELECT 1")
    opened = [s.parameters for s in cluster.server.startups if s.parameters.get("database") == NAME]
    # CockroachDB's startup options went with it: the engine was known before the connect.
    assert opened and opened[0]["options"] == " ".join(COCKROACHDB.startup_options())


def test_create_database_is_retried_while_cockroachdb_says_42501_and_then_succeeds():
    pauses: list[float] = []
    with Cluster(denials=2) as cluster:
        with Session(Dsn.parse(cluster.server.url())) as session:
            support.create_database_when_allowed(session, NAME, pause=0.25, sleep=pauses.append)
    assert cluster.texts() == [f'CREATE DATABASE "{NAME}"'] * 3
    assert pauses == [0.25, 0.25]


def test_create_database_gives_up_on_42501_once_its_patience_is_spent():
    with Cluster(denials=5) as cluster:
        with Session(Dsn.parse(cluster.server.url())) as session:
            with pytest.raises(DatabaseError, match="permission denied to create database"):
                support.create_database_when_allowed(session, NAME, patience=-1, sleep=lambda _: None)
    assert cluster.texts() == [f'CREATE DATABASE "{NAME}"']


def test_create_database_does_not_retry_another_error():
    def exists(received):
        # pkg/sql/sqlerrors/errors.go NewDatabaseAlreadyExistsError: 42P04 'database %q already exists'.
        return Error("42P04", f'database "{NAME}" already exists') if received.text.startswith("CREATE") else None

    with RecordedCockroach(exists) as server:
        with Session(Dsn.parse(server.url())) as session:
            with pytest.raises(DatabaseError, match="already exists"):
                support.create_database_when_allowed(session, NAME, sleep=lambda _: pytest.fail("retried"))
    assert len(server.received) == 1


def test_emptying_drops_staging_tables_deletes_every_shardq_table_and_reads_the_layout_again():
    with Cluster(stage_tables=("shardq_stage_00aa", "shardq_stage_01bb")) as cluster:
        database = support.fresh_database(cluster.server.url(), buckets=BUCKETS, name=NAME)
        before = len(cluster.server.received)
        assert support.emptied(database) is database
        database.client.close()
    sent = [r.text.strip() if r.name != "shard_layout_get" else r.name for r in cluster.server.received[before:]]
    assert sent == [
        support.STAGE_TABLES.replace("%%", "%"),
        'DROP TABLE IF EXISTS "shardq_stage_00aa"',
        'DROP TABLE IF EXISTS "shardq_stage_01bb"',
        *[f"DELETE FROM {table} WHERE true" for table in support.SHARDQ_TABLES],
        "shard_layout_get",
    ]
    assert not [r for r in cluster.server.received[before:] if r.in_transaction]


def test_closing_a_test_database_drops_it_from_the_root_database():
    with Cluster() as cluster:
        database = support.fresh_database(cluster.server.url(), buckets=BUCKETS, name=NAME)
        database.close()
    dropped = [r for r in cluster.server.received if r.text.startswith("DROP DATABASE")]
    assert [(r.text, r.startup["database"]) for r in dropped] == [
        (f'DROP DATABASE IF EXISTS "{NAME}" CASCADE', "defaultdb")
    ]


def test_the_cluster_url_variable_is_honoured_and_a_postgresql_url_still_migrates_cockroachdb(monkeypatch):
    monkeypatch.delenv(support.URL_VARIABLE, raising=False)
    assert support.cluster_url() is None
    monkeypatch.setenv(support.URL_VARIABLE, "  ")
    assert support.cluster_url() is None
    with Cluster() as cluster:
        url = cluster.server.url(scheme="postgresql")
        monkeypatch.setenv(support.URL_VARIABLE, url)
        assert support.cluster_url() == url
        database = support.fresh_database(url, buckets=BUCKETS, name=NAME)
        database.client.close()
    assert database.dsn.named_engine is None  # the server told: crdb_version at connect
    assert database.layout.bucket_count == BUCKETS
    assert any("USING HASH WITH (bucket_count = 4)" in text for text in cluster.texts(database=NAME))
