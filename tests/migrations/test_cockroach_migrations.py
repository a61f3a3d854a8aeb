"""``shardq migrate`` on CockroachDB, against the recorded CockroachDB: the SQLAlchemy CockroachDB
dialect's handshake over psycopg, Alembic in AUTOCOMMIT, every revision's CockroachDB branch and
the ``alembic_version`` row. The answers and their sources: :mod:`tests.support.recorded_schema`."""

from __future__ import annotations

import importlib
import pkgutil
import re

import pytest

import shardq.migrations.versions as versions
from shardq.engine import COCKROACHDB
from shardq.errors import DatabaseError
from shardq.migrations import apply as migrate
from shardq.sessions.dsn import Dsn
from tests.conformance.collect import migration_statements
from tests.support.recorded_cockroach import CRDB_VERSION_23_1, Error, RecordedCockroach
from tests.support.recorded_schema import RecordedSchema

pytestmark = pytest.mark.recorded

BUCKETS = 4
HANDSHAKE = [
    "select current_schema()",
    "show transaction isolation level",
    "show standard_conforming_strings",
    "select version()",
]
_VERSION_WRITE = re.compile(
    r"^(?:INSERT INTO alembic_version .*VALUES \('(\w+)'\)|UPDATE alembic_version SET "
    r"version_num='(\w+)')"
)


def _revisions() -> list[tuple[str, str]]:
    """(revision id, module name) of every revision, oldest first."""
    found = []
    for info in sorted(pkgutil.iter_modules(versions.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{versions.__name__}.{info.name}")
        found.append((module.revision, info.name))
    return found


def _flat(text: str) -> str:
    return " ".join(text.split())


def _migration_traffic(server: RecordedCockroach):
    return [r for r in server.received if r.startup.get("application_name") == "shardq-migrate"]


def _ddl_by_revision(server: RecordedCockroach) -> dict[str, list[str]]:
    """The DDL the migration connection sent, grouped under the revision whose version write
    followed it (Alembic writes a revision's version after its statements)."""
    grouped: dict[str, list[str]] = {}
    pending: list[str] = []
    for received in _migration_traffic(server):
        text = received.text.strip()
        written = _VERSION_WRITE.match(text)
        if written:
            grouped[written.group(1) or written.group(2)] = pending
            pending = []
        elif re.match(r"^(CREATE|ALTER|DROP) ", text) and "alembic_version" not in text:
            pending.append(_flat(text))
    assert pending == [], f"DDL after the last version write: {pending}"
    return grouped


def test_a_fresh_migration_answers_the_dialect_handshake_then_writes_every_revision_in_order():
    schema = RecordedSchema(buckets=BUCKETS)
    with RecordedCockroach(schema) as server:
        result = migrate.upgrade(Dsn.parse(server.url()), buckets=BUCKETS)
    assert (result.before, result.after, result.dialect) == (None, migrate.head_revision(), "cockroachdb")
    assert not result.buckets_ignored
    texts = [r.text.strip() for r in _migration_traffic(server)]
    # sqlalchemy-cockroachdb's initialize (PGDialect's, then "select version()"), before any DDL.
    assert texts[:4] == HANDSHAKE
    writes = [m.group(1) or m.group(2) for m in map(_VERSION_WRITE.match, texts) if m]
    assert writes == [revision for revision, _ in _revisions()]
    inserted = next(t for t in texts if t.startswith("INSERT INTO alembic_version"))
    assert inserted.endswith("RETURNING alembic_version.version_num")
    assert schema.version == migrate.head_revision()
    # Alembic looked for its table (the dialect's has_table reads information_schema), then made it.
    assert texts[4] == "SELECT table_name FROM information_schema.tables WHERE table_schema=$1"
    assert [_flat(t) for t in texts if t.startswith("CREATE TABLE alembic_version")] == [
        "CREATE TABLE alembic_version ( version_num VARCHAR(32) NOT NULL, "
        "CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num) )"
    ]


def test_every_ddl_statement_commits_alone_outside_any_transaction():
    with RecordedCockroach(RecordedSchema(buckets=BUCKETS)) as server:
        migrate.upgrade(Dsn.parse(server.url()), buckets=BUCKETS)
    traffic = _migration_traffic(server)
    # CockroachDB's Ddl.transactional is False: the SQLAlchemy engine runs in AUTOCOMMIT, so no
    # BEGIN, COMMIT or SAVEPOINT reaches the server and no statement runs inside a transaction.
    assert not [r.text for r in traffic if re.match(r"\s*(BEGIN|COMMIT|ROLLBACK|SAVEPOINT|START)", r.text, re.I)]
    assert not [r.text for r in traffic if r.in_transaction]
    ddl = [r.text for r in traffic if re.match(r"\s*(CREATE|ALTER|DROP) ", r.text)]
    assert len(ddl) > 50
    assert not [text for text in ddl if ";" in text.strip().rstrip(";")]


def test_each_revision_sends_its_cockroachdb_branch_as_rendered_offline():
    with RecordedCockroach(RecordedSchema(buckets=BUCKETS)) as server:
        migrate.upgrade(Dsn.parse(server.url()), buckets=BUCKETS)
    sent = _ddl_by_revision(server)
    offline: dict[str, list[str]] = {}
    for statement in migration_statements(COCKROACHDB, buckets=BUCKETS):
        _, module, step = statement.origin.split(":")
        if step == "upgrade":
            offline.setdefault(module, []).append(_flat(statement.text))
    for revision, module in _revisions():
        assert sent.get(revision, []) == offline.get(module, []), revision
    first = " ".join(sent["0001"])
    assert "PRIMARY KEY (state, queue, rank, exec_time, id) USING HASH WITH (bucket_count = 4)" in first
    assert "payload BYTES NOT NULL" in first and "queue STRING NOT NULL" in first
    everything = " ".join(" ".join(texts) for texts in sent.values())
    # PostgreSQL's branches: a bucket column and table, lease records, fillfactor, BYTEA/TEXT.
    for postgresql_only in ("shardq_leases", "shardq_buckets", "fillfactor", "BYTEA", " TEXT ", "floor(random()"):
        assert postgresql_only not in everything
    assert sent["0004_tasks_fillfactor"] == [] and sent["0019_tasks_by_run"] == []
    assert any("shardq_history (queue, finished_at, id) USING HASH" in text for text in sent["0008_task_history"])


def test_the_engine_is_found_from_the_server_when_the_url_does_not_name_it():
    with RecordedCockroach(RecordedSchema(buckets=BUCKETS)) as server:
        result = migrate.upgrade(Dsn.parse(server.url(scheme="postgresql")), buckets=BUCKETS)
    assert result.dialect == "cockroachdb"
    assert "USING HASH WITH (bucket_count = 4)" in " ".join(_ddl_by_revision(server)["0001"])


def test_an_up_to_date_database_is_left_alone_and_its_bucket_count_reported_ignored():
    head = migrate.head_revision()
    schema = RecordedSchema(tables={"alembic_version", "shardq_tasks"}, version=head, buckets=BUCKETS)
    with RecordedCockroach(schema) as server:
        result = migrate.upgrade(Dsn.parse(server.url()), buckets=32)
    assert (result.before, result.after, result.changed, result.buckets_ignored) == (head, head, False, True)
    assert not [r.text for r in _migration_traffic(server) if re.match(r"\s*(CREATE|ALTER|DROP|INSERT|UPDATE)", r.text)]


def test_an_oldest_supported_node_takes_the_same_migration():
    with RecordedCockroach(
        RecordedSchema(buckets=BUCKETS, crdb_version=CRDB_VERSION_23_1), crdb_version=CRDB_VERSION_23_1
    ) as server:
        result = migrate.upgrade(Dsn.parse(server.url()), buckets=BUCKETS)
    assert result.after == migrate.head_revision()


def test_a_refused_statement_fails_the_migration_with_the_servers_message():
    def refuse(received):
        if received.text.startswith("ALTER TABLE shardq_queues ADD COLUMN timeout_seconds"):
            # An existing column: pkg/sql/sqlerrors/errors.go, NewColumnAlreadyExistsInRelationError
            # (pgcode.DuplicateColumn, 42701, 'column %q of relation %q already exists').
            return Error("42701", 'column "timeout_seconds" of relation "shardq_queues" already exists')
        return None

    schema = RecordedSchema(buckets=BUCKETS, extra=refuse)
    with RecordedCockroach(schema) as server:
        with pytest.raises(DatabaseError, match="already exists"):
            migrate.upgrade(Dsn.parse(server.url()), buckets=BUCKETS)
    # Autocommit: the revisions before the refused one stay applied.
    assert schema.version == "0004_tasks_fillfactor"
