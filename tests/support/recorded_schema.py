"""What a CockroachDB cluster answers while ``shardq migrate`` runs, for the recorded CockroachDB
(:mod:`tests.support.recorded_cockroach`): the SQLAlchemy CockroachDB dialect's handshake, Alembic's
``alembic_version`` bookkeeping, every DDL statement's command tag, and the layout read that
follows. :class:`RecordedSchema` keeps the tables created so far, so the catalog reads answer as a
cluster would before and after each revision.

Where each answer comes from (``cockroachdb/cockroach``):

* ``select current_schema()`` → ``public``: ``pkg/sql/logictest/testdata/logic_test/builtin_function``
  (``query T`` ``SELECT current_schema()`` after ``RESET search_path``, expected ``public``). The
  column is named after the function, as that file records for ``SELECT pg_is_in_recovery()``
  (``query B colnames``: ``pg_is_in_recovery``).
* ``show transaction isolation level`` → column ``transaction_isolation``, ``serializable``:
  ``logic_test/show_source`` (``query T colnames`` ``SELECT * FROM [SHOW TRANSACTION ISOLATION
  LEVEL]``) and ``logic_test/txn`` ("SHOW without a transaction should create an auto-transaction
  with the default level": ``serializable``).
* ``show standard_conforming_strings`` → ``on``: ``logic_test/show_source`` (``SHOW ALL`` lists
  ``standard_conforming_strings  on``; a ``SHOW <variable>`` column is named after the variable, as
  ``SELECT * FROM [SHOW client_encoding]`` records with ``colnames``).
* ``select version()``: no logic test records the text (it is the build's), but
  ``logic_test/builtin_function`` records ``SELECT (SELECT * FROM [SHOW crdb_version]) = version()``
  as ``true``, and the builtin returns ``build.GetInfo().Short()`` (``pkg/sql/sem/builtins``,
  "version"): the server's ``crdb_version`` parameter, which the recorded server reports.
* ``information_schema.tables``: ``TABLE_NAME STRING NOT NULL`` (``pkg/sql/vtable/information_schema.go``,
  InformationSchemaTables); STRING is OID 25 (``TEXT`` here). The rows are this database's tables.
* Command tags: ``StatementTag`` in ``pkg/sql/sem/tree/stmt.go`` (``CREATE TABLE``, ``CREATE INDEX``
  for unique indexes too, ``ALTER TABLE``, ``CREATE DATABASE``, ``DROP TABLE``, ``DELETE``), completed
  by ``cookTag`` (``pkg/sql/pgwire/command_result.go``): DDL tags alone, ``INSERT`` becomes
  ``INSERT 0 <n>``, other row counts are appended (``UPDATE 1``, ``DELETE 0``).
* The layout read (``shard_layout_get``): ``logic_test/hash_sharded_index`` records a hash-sharded
  primary key in ``pg_indexes`` as ``CREATE UNIQUE INDEX "primary" ON test.public.sharded_primary
  USING btree (a ASC) USING HASH WITH (bucket_count=10)`` and its shard column
  ``crdb_internal_a_shard_10`` as the key's implicit first column; adapted here to shardq's table,
  index (``shardq_tasks_pkey``), columns and bucket count. The shard column of several columns is
  named from their sorted names (``GetShardColumnName``, ``pkg/sql/catalog/tabledesc``).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

from tests.support.recorded_cockroach import CRDB_VERSION_24_3, Answer, Command, Received, Rows

_CREATE_TABLE = re.compile(r"^\s*CREATE TABLE (?:IF NOT EXISTS )?(\w+)", re.I)
_CREATE_INDEX = re.compile(r"^\s*CREATE (?:UNIQUE )?INDEX\b", re.I)
_ALTER_TABLE = re.compile(r"^\s*ALTER TABLE\b", re.I)
_VERSION_INSERT = re.compile(r"^INSERT INTO alembic_version \(version_num\) VALUES \('(\w+)'\)")
_VERSION_UPDATE = re.compile(
    r"^UPDATE alembic_version SET version_num='(\w+)' WHERE alembic_version.version_num = '(\w+)'"
)
_SHARD_COLUMNS = "exec_time_id_queue_rank_state"


def task_layout_rows(buckets: int, database: str = "defaultdb") -> Rows:
    """``shard_layout_get``'s answer for shardq's tasks table with ``buckets`` buckets."""
    return Rows(
        [("index_name", "TEXT"), ("shard_column", "TEXT"), ("index_definition", "TEXT")],
        [
            (
                "shardq_tasks_pkey",
                f"crdb_internal_{_SHARD_COLUMNS}_shard_{buckets}",
                f"CREATE UNIQUE INDEX shardq_tasks_pkey ON {database}.public.shardq_tasks USING btree (state ASC, "
                f"queue ASC, rank ASC, exec_time ASC, id ASC) USING HASH WITH (bucket_count={buckets})",
            )
        ],
    )


class RecordedSchema:
    """An answer function for a database being migrated: see the module documentation.

    ``tables`` are the tables that exist (a fresh database has none), ``version`` the revision in
    ``alembic_version`` (None: no row). ``extra`` answers anything else first (None: not its)."""

    def __init__(
        self,
        *,
        tables: set[str] | None = None,
        version: str | None = None,
        buckets: int = 4,
        crdb_version: str = CRDB_VERSION_24_3,
        extra: Callable[[Received], Answer | None] | None = None,
    ) -> None:
        self.tables = set(tables or ())
        self.version = version
        self.buckets = buckets
        self.crdb_version = crdb_version
        self.extra = extra
        self._lock = threading.Lock()

    def __call__(self, received: Received) -> Answer | None:
        if self.extra is not None:
            found = self.extra(received)
            if found is not None:
                return found
        with self._lock:
            return self._answer(received)

    def _answer(self, received: Received) -> Answer | None:
        text = received.text.strip()
        lowered = text.lower()
        if received.name == "schema_tasks_table_present":
            return Rows([("present", "INT8")], [(1,)] if "shardq_tasks" in self.tables else [])
        if received.name == "shard_layout_get":
            database = received.startup.get("database", "defaultdb")
            return (
                task_layout_rows(self.buckets, database)
                if "shardq_tasks" in self.tables
                else Rows(task_layout_rows(self.buckets).columns, [])
            )
        if lowered == "select current_schema()":
            return Rows([("current_schema", "TEXT")], [("public",)])
        if lowered == "show transaction isolation level":
            return Rows([("transaction_isolation", "TEXT")], [("serializable",)])
        if lowered == "show standard_conforming_strings":
            return Rows([("standard_conforming_strings", "TEXT")], [("on",)])
        if lowered == "select version()":
            return Rows([("version", "TEXT")], [(self.crdb_version,)])
        if text == "SELECT table_name FROM information_schema.tables WHERE table_schema=$1":
            assert received.params == ("public",), received.params
            return Rows([("table_name", "TEXT")], [(name,) for name in sorted(self.tables)])
        if " ".join(text.split()) == "SELECT alembic_version.version_num FROM alembic_version":
            return Rows([("version_num", "VARCHAR")], [(self.version,)] if self.version else [])
        created = _CREATE_TABLE.match(text)
        if created:
            self.tables.add(created.group(1))
            return Command("CREATE TABLE")
        if _CREATE_INDEX.match(text):
            return Command("CREATE INDEX")
        if _ALTER_TABLE.match(text):
            return Command("ALTER TABLE")
        inserted = _VERSION_INSERT.match(text)
        if inserted:
            self.version = inserted.group(1)
            return Rows([("version_num", "VARCHAR")], [(self.version,)], tag="INSERT 0 1")
        updated = _VERSION_UPDATE.match(text)
        if updated:
            if updated.group(2) != self.version:
                return Command("UPDATE 0")
            self.version = updated.group(1)
            return Command("UPDATE 1")
        return None


__all__ = ["RecordedSchema", "task_layout_rows"]
