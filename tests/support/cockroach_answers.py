"""CockroachDB's answers to shardq's statements, as recorded in CockroachDB's own source, for the
recorded server (:mod:`tests.support.recorded_cockroach`). Each value names where it was recorded;
where a logic test records it for another table, only the names are changed, and the comment says
which.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from typing import Any

from tests.support.recorded_cockroach import Error, Rows

#: The shard column of ``shardq_tasks``'s primary key with 16 buckets: "crdb_internal_" + the key
#: columns sorted + "_shard_<N>" (``pkg/sql/catalog/tabledesc/table.go``, GetShardColumnName:
#: ``sort.Strings(colNames)``), the key being (state, queue, rank, exec_time, id).
SHARD_COLUMN_16 = "crdb_internal_exec_time_id_queue_rank_state_shard_16"
SHARD_COLUMN_32 = "crdb_internal_exec_time_id_queue_rank_state_shard_32"


#: ``pg_indexes.indexdef`` of a hash-sharded primary key:
#: ``pkg/sql/logictest/testdata/logic_test/hash_sharded_index``, the block
#: ``SELECT tablename, indexname, indexdef FROM pg_indexes WHERE tablename = 'sharded_primary'``::
#:
#:     sharded_primary  primary  CREATE UNIQUE INDEX "primary" ON test.public.sharded_primary USING btree (a ASC) USING HASH WITH (bucket_count=10)
#:
#: adapted: the index, database, table, columns and bucket count are shardq's.
def primary_index_definition(bucket_count: int = 16) -> str:
    return (
        "CREATE UNIQUE INDEX shardq_tasks_pkey ON defaultdb.public.shardq_tasks USING btree "
        f"(state ASC, queue ASC, rank ASC, exec_time ASC, id ASC) USING HASH WITH (bucket_count={bucket_count})"
    )


#: The same logic test's secondary hash-sharded index (``SHOW CREATE TABLE sharded_secondary``:
#: ``INDEX sharded_secondary_a_idx (a ASC) USING HASH WITH (bucket_count=4)``) as pg_indexes
#: renders an index, adapted to an operator's own index on shardq_tasks.
SECONDARY_INDEX_DEFINITION = (
    "CREATE INDEX shardq_tasks_queue_idx ON defaultdb.public.shardq_tasks USING btree "
    "(queue ASC) USING HASH WITH (bucket_count=4)"
)

#: ``shard_layout_get``'s columns: information_schema.statistics' index_name and column_name
#: (``pkg/sql/vtable/information_schema.go``, STRING) and pg_indexes' indexdef (STRING).
LAYOUT_COLUMNS = [("index_name", "TEXT"), ("shard_column", "TEXT"), ("index_definition", "TEXT")]


def layout_rows(*rows: tuple[str, str, str]) -> Rows:
    """``shard_layout_get``'s answer: one (index name, shard column, index definition) per
    hash-sharded index's implicit first key column (``SHOW INDEXES`` in ``hash_sharded_index``:
    ``primary  crdb_internal_a_shard_10  true`` is the first, implicit column)."""
    return Rows(LAYOUT_COLUMNS, list(rows))


def layout_16() -> Rows:
    return layout_rows(("shardq_tasks_pkey", SHARD_COLUMN_16, primary_index_definition(16)))


# -- errors ------------------------------------------------------------------------------------

#: 40001 (``pkg/sql/pgwire/pgcode/codes.go``: SerializationFailure = "40001"): the retry error a
#: session with ``inject_retry_errors_enabled`` gets for every statement in a transaction
#: (``pkg/sql/conn_executor_exec.go``: GenerateForcedRetryableError(ctx, "injected by
#: `inject_retry_errors_enabled` session variable")), as CockroachDB's documentation prints it
#: (docs, "transaction retry error" / inject_retry_errors_enabled).
RETRY_40001 = Error(
    "40001",
    "restart transaction: TransactionRetryWithProtoRefreshError: "
    "injected by `inject_retry_errors_enabled` session variable",
)

#: 40003 (``codes.go``: StatementCompletionUnknown = "40003"): an AmbiguousResultError
#: (``pkg/kv/kvpb/errors.go``, SafeFormatError: "result is ambiguous: %s") reaches the client with
#: that code (``pkg/sql/pgwire/pgerror`` TestFlatten: NewAmbiguousResultErrorf("woo") →
#: message "result is ambiguous.*woo", code StatementCompletionUnknown).
AMBIGUOUS_40003 = Error("40003", "result is ambiguous: woo")

#: 57014 when ``statement_timeout`` expires: ``pkg/sql/sqlerrors/errors.go``, ``QueryTimeoutError =
#: pgerror.New(pgcode.QueryCanceled, "query execution canceled due to statement timeout")``.
STATEMENT_TIMEOUT_57014 = Error("57014", "query execution canceled due to statement timeout")


def undefined_column(column: str) -> Error:
    """42703 for a column that no longer exists: ``logic_test/hash_sharded_index``, ``statement
    error pq: column "crdb_internal_a_shard_3" does not exist`` (the shard column of a dropped
    sharded index); the column name is the argument."""
    return Error("42703", f'column "{column}" does not exist')


def undefined_table(name: str) -> Error:
    """42P01: ``logic_test/pgoidtype``, ``query error pgcode 42P01 relation "blah" does not
    exist``; the relation name is the argument."""
    return Error("42P01", f'relation "{name}" does not exist')


# -- EXPLAIN -----------------------------------------------------------------------------------

#: ``pkg/sql/opt/exec/execbuilder/testdata/select_for_update``, "Tests with the SKIP LOCKED lock
#: wait policy": ``EXPLAIN (VERBOSE) SELECT * FROM t FOR UPDATE SKIP LOCKED`` (an unconstrained,
#: unlimited locking scan).
EXPLAIN_SKIP_LOCKED_FULL_SCAN = """\
distribution: local
vectorized: true
·
• scan
  columns: (a, b)
  estimated row count: 1,000 (missing stats)
  table: t@t_pkey
  spans: FULL SCAN
  locking strength: for update
  locking wait policy: skip locked"""

#: The same file: ``EXPLAIN (VERBOSE) SELECT * FROM t WHERE a = 1 FOR UPDATE SKIP LOCKED``.
EXPLAIN_SKIP_LOCKED_POINT = """\
distribution: local
vectorized: true
·
• scan
  columns: (a, b)
  estimated row count: 1 (missing stats)
  table: t@t_pkey
  spans: /1/0
  locking strength: for update
  locking wait policy: skip locked"""

#: The same file: ``EXPLAIN (VERBOSE) SELECT * FROM u WHERE b = 2 LIMIT 1 FOR UPDATE SKIP LOCKED``:
#: the limit is an operator above the locking scans, so the scan itself locks without one.
EXPLAIN_SKIP_LOCKED_LIMIT_ABOVE = """\
distribution: local
vectorized: true
·
• limit
│ columns: (a, b, c)
│ count: 1
│
└── • index join
    │ columns: (a, b, c)
    │ estimated row count: 10 (missing stats)
    │ table: u@u_pkey
    │ key columns: a
    │ locking strength: for update
    │ locking wait policy: skip locked
    │ parallel
    │
    └── • scan
          columns: (a, b)
          estimated row count: 10 (missing stats)
          table: u@u_b_idx
          spans: /2-/3
          locking strength: for update
          locking wait policy: skip locked"""

#: :data:`EXPLAIN_SKIP_LOCKED_POINT` with the hard limit a scan prints when the limit is pushed
#: into it: ``pkg/sql/opt/exec/explain/emit.go`` (emitNodeAttributes, scanOp) emits "spans", then
#: ``if a.Params.HardLimit > 0 { ob.Attr("limit", a.Params.HardLimit) }``, then "parallel", then
#: the locking policy. No recorded EXPLAIN of a hard-limited SKIP LOCKED scan was found in the
#: testdata read; the line is placed where emit.go places it.
EXPLAIN_SKIP_LOCKED_HARD_LIMIT = EXPLAIN_SKIP_LOCKED_POINT.replace("  spans: /1/0\n", "  spans: /1/0\n  limit: 1\n")

#: The same file, ``EXPLAIN (VERBOSE) SELECT * FROM t WHERE a = 1 FOR UPDATE``, without locking
#: policy lines: a constrained scan.
EXPLAIN_POINT_FOR_UPDATE = """\
distribution: local
vectorized: true
·
• scan
  columns: (a, b)
  estimated row count: 1 (missing stats)
  table: t@t_pkey
  spans: /1/0
  locking strength: for update"""


def explain_spans(spans: Sequence[str]) -> str:
    """A scan whose constraint has ``spans``, as ``emit.go`` (spansStr) prints it: up to 4
    logical spans, then ``fmt.Sprintf("%s … (%d more)", trunc.String(), sp.Count()-maxSpans)``
    (maxSpans = 4), spans separated by spaces (constraint.Spans.String). The surrounding scan is
    :data:`EXPLAIN_POINT_FOR_UPDATE`'s."""
    shown = " ".join(spans[:4])
    text = f"{shown} … ({len(spans) - 4} more)" if len(spans) > 4 else shown
    return EXPLAIN_POINT_FOR_UPDATE.replace("spans: /1/0", f"spans: {text}")


# -- rows of shardq's statements ---------------------------------------------------------------

#: ``task_claim_batch``'s RETURNING list with the types of migration 0001's CockroachDB table
#: (rank INT8, attempts/max_attempts INT4, priority INT8, payload BYTES) and 0010's workflow_id UUID.
CLAIM_COLUMNS = [
    ("bucket", "INT8"),
    ("queue", "TEXT"),
    ("rank", "INT8"),
    ("exec_time", "TIMESTAMPTZ"),
    ("id", "UUID"),
    ("attempts", "INT4"),
    ("max_attempts", "INT4"),
    ("payload", "BYTES"),
    ("lease_expires_at", "TIMESTAMPTZ"),
    ("created_at", "TIMESTAMPTZ"),
    ("priority", "INT8"),
    ("exclusive_key", "TEXT"),
    ("workflow_id", "UUID"),
]

NOW = dt.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=dt.UTC)


def claimed_row(
    bucket: int, queue: str, task_id: uuid.UUID, *, rank: int = 0, exec_time: dt.datetime = NOW, payload: bytes = b"{}"
) -> tuple[Any, ...]:
    return (
        bucket,
        queue,
        rank,
        exec_time,
        task_id,
        1,
        25,
        payload,
        NOW + dt.timedelta(seconds=30),
        NOW - dt.timedelta(seconds=1),
        rank,
        None,
        None,
    )


#: ``queue_list``'s columns (sql/common/queues.sql; migration 0001/0006/0008/0013 types).
QUEUE_COLUMNS = [
    ("name", "TEXT"),
    ("lease_seconds", "FLOAT8"),
    ("max_attempts", "INT4"),
    ("backoff_base", "FLOAT8"),
    ("backoff_cap", "FLOAT8"),
    ("retry_jitter", "FLOAT8"),
    ("exclusive_latest_only", "BOOL"),
    ("paused_enqueue", "BOOL"),
    ("paused_dequeue", "BOOL"),
    ("timeout_seconds", "FLOAT8"),
    ("concurrency_limit", "INT4"),
    ("rate_limit", "FLOAT8"),
    ("rate_burst", "INT4"),
    ("keep_finished_seconds", "FLOAT8"),
    ("keep_results", "BOOL"),
]

#: ``table_schema_jobs_running``'s columns: ``pkg/sql/crdb_internal.go`` crdbInternalJobsTable
#: (``job_id INT, job_type STRING, … status STRING, running_status STRING, … fraction_completed
#: FLOAT, … description STRING``).
JOB_COLUMNS = [
    ("job_id", "INT8"),
    ("job_type", "TEXT"),
    ("status", "TEXT"),
    ("running_status", "TEXT"),
    ("fraction_completed", "FLOAT8"),
    ("description", "TEXT"),
]
