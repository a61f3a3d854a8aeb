"""The Python side of the Spark bulk enqueue that only CockroachDB takes, against the recorded
CockroachDB, without starting Spark: the writer choice (the staging path: no COPY writer), the
staging table's life (registered, created with CockroachDB's DDL, dropped, forgotten), a chunk's
merge transaction and its 40001 retry, and a run callback's settling (no lock on CockroachDB).

The rows answered are shardq's own columns, typed as CockroachDB types them: ``STRING`` is OID 25
and ``INT4``/``INT8``/``BOOL``/``TIMESTAMPTZ``/``UUID`` carry PostgreSQL's OIDs
(``pkg/sql/types/types.go``); ``count(*)`` is ``INT8`` (``pkg/sql/sem/builtins/aggregate_builtins.go``,
count's ReturnType ``types.Int``). Command tags: ``StatementTag`` (``pkg/sql/sem/tree/stmt.go``)
through ``cookTag`` (``pkg/sql/pgwire``): ``INSERT 0 1``, ``UPDATE 1``, ``DELETE 1``, ``CREATE
TABLE``, ``DROP TABLE``. The 40001: ``pkg/sql/logictest/testdata/logic_test/txn`` (``pgcode 40001
restart transaction: … TransactionRetryWithProtoRefreshError …``).
"""

from __future__ import annotations

import uuid

import pytest

from shardq.sessions.dsn import Dsn
from shardq.sessions.session import Session
from shardq.spark import job
from shardq.spark.ledger import SCHEME_BY_KEY, Run, SparkLedger, Stage, merge_chunks, stage_name
from shardq.spark.options import WriteOptions
from shardq.workflows import spark_callbacks as run_callbacks
from tests.support.recorded_cockroach import Command, Error, Received, RecordedCockroach, Rows

pytestmark = pytest.mark.recorded

RUN = "run-1"
RETRY = Error(
    "40001",
    "restart transaction: TransactionRetryWithProtoRefreshError: WriteTooOldError: write "
    "for key /Table/120/1 at timestamp 1700000000.000000000,0 too old",
)


class Recorded:
    """Answers by statement name; ``retry`` names a statement answered 40001 once."""

    def __init__(self, retry: str | None = None) -> None:
        self.retry = retry

    def __call__(self, received: Received):
        name = received.name
        if name is not None and name == self.retry:
            self.retry = None
            return RETRY
        return {
            "spark_stage_register": Command("INSERT 0 1"),
            "spark_server_started": Rows([("started", "TIMESTAMPTZ")], [(None,)]),
            "spark_stage_create": Command("CREATE TABLE"),
            "spark_stage_drop": Command("DROP TABLE"),
            "spark_stage_forget": Command("DELETE 1"),
            "spark_stage_rows": Rows([("n", "INT8")], [(3,)]),
            "spark_chunk_take": Rows([("chunk", "INT4")], [(0,)], tag="INSERT 0 1"),
            "spark_chunk_merge": Rows([("merged", "INT8"), ("paused", "BOOL")], [(3, False)]),
            "spark_chunk_record": Command("UPDATE 1"),
            "spark_callback_lock": Rows([("workflow_id", "UUID")], []),
            "spark_callback_due": Rows([("workflow_id", "UUID")], []),
            "stats_add_many": Command("INSERT 0 1"),  # the merge's enqueue counts, one queue
        }.get(name or "")


def _run() -> Run:
    return Run(run_id=RUN, queue="q", chunks=2, scheme=SCHEME_BY_KEY, workflow_id=None)


def test_cockroachdb_takes_the_staging_path_even_where_the_copy_writer_could_run():
    pytest.importorskip("pyarrow")
    with RecordedCockroach() as server:
        with Session(Dsn.parse(server.url())) as session:
            assert session.engine.spark_copy_writer is False
            for writer in ("auto", "jdbc", "copy"):
                assert job._copy_writer(WriteOptions(writer=writer), session, _run()) is False
    assert server.received == []  # decided from the engine the URL names, nothing asked


def test_a_staging_table_is_registered_then_created_with_cockroachdbs_ddl_then_dropped_and_forgotten():
    stage = stage_name(RUN, "0123abcd")
    with RecordedCockroach(Recorded()) as server:
        with Session(Dsn.parse(server.url())) as session:
            ledger = SparkLedger(session)
            created = ledger.stage_create(stage, RUN)
            ledger.stage_ready_for_merge(stage)  # CockroachDB: the key already leads with the chunk
            assert ledger.stage_rows(stage) == 3
            ledger.stage_drop(stage)
    assert created == Stage(stage, None)
    assert server.names_received() == [
        "spark_stage_register",
        "spark_server_started",
        "spark_stage_create",
        "spark_stage_rows",
        "spark_stage_drop",
        "spark_stage_forget",
    ]
    ddl = next(r for r in server.received if r.name == "spark_stage_create")
    assert f'CREATE TABLE "{stage}"' in ddl.text
    for cockroachdb in ("id STRING NOT NULL", "payload BYTES", "DEFAULT gen_random_uuid()", "PRIMARY KEY (chunk, rid)"):
        assert cockroachdb in ddl.text
    assert "UNLOGGED" not in ddl.text and "TEMP" not in ddl.text
    assert not [r.name for r in server.received if r.in_transaction]


def test_each_chunk_merges_in_one_serializable_transaction_with_its_ledger_row():
    stage = Stage(stage_name(RUN, "0123abcd"), None)
    with RecordedCockroach(Recorded()) as server:
        outcome = merge_chunks(_run(), stage, [0, 1], lambda: Session(Dsn.parse(server.url())), workers=1)
    assert (outcome.merged_chunks, outcome.skipped_chunks, outcome.tasks) == (2, 0, 6)
    chunk = [
        "BEGIN ISOLATION LEVEL SERIALIZABLE",
        "spark_server_started",
        "spark_chunk_take",
        "spark_chunk_merge",
        "spark_chunk_record",
        "COMMIT",
    ]
    assert [n for n in server.names_received() if n != "stats_add_many"] == chunk + chunk
    # The enqueue counts go out after a chunk's commit (batched in time), never inside a merge.
    counts = [r for r in server.received if r.name == "stats_add_many"]
    assert counts and not [r for r in counts if r.in_transaction]
    assert server.names_received()[6] == "stats_add_many"
    merge = next(r for r in server.received if r.name == "spark_chunk_merge")
    assert f'FROM "{stage.name}" AS s' in merge.text and merge.in_transaction


def test_a_chunk_merge_cancelled_by_cockroachdb_runs_again_whole():
    stage = Stage(stage_name(RUN, "0123abcd"), None)
    with RecordedCockroach(Recorded(retry="spark_chunk_merge")) as server:
        with Session(Dsn.parse(server.url())) as session:
            merged = SparkLedger(session).chunk_merge(_run(), stage, 0)
    assert merged == 3
    assert server.names_received() == [
        "BEGIN ISOLATION LEVEL SERIALIZABLE",
        "spark_server_started",
        "spark_chunk_take",
        "spark_chunk_merge",
        "ROLLBACK",
        "BEGIN ISOLATION LEVEL SERIALIZABLE",
        "spark_server_started",
        "spark_chunk_take",
        "spark_chunk_merge",
        "spark_chunk_record",
        "COMMIT",
    ]


@pytest.mark.parametrize(
    "outcome, names",
    [
        ("succeeded", ["spark_callback_lock", "spark_callback_due"]),
        ("dead", ["spark_callback_lock"]),
    ],
)
def test_settling_a_runs_callback_reads_its_row_without_locking_it(outcome, names):
    marks = [run_callbacks.mark_of(RUN), uuid.UUID(int=0)]
    with RecordedCockroach(Recorded()) as server:
        with Session(Dsn.parse(server.url())) as session:
            session.transaction(lambda s: s.run(run_callbacks.settle_plan(marks, outcome)))
    assert server.names_received() == ["BEGIN ISOLATION LEVEL SERIALIZABLE", *names, "COMMIT"]
    lock = next(r for r in server.received if r.name == "spark_callback_lock")
    # CockroachDB's statement: SERIALIZABLE replaces PostgreSQL's FOR UPDATE (spark_callbacks.sql).
    assert "FOR UPDATE" not in lock.text.upper()
    assert lock.params[0] is not None
