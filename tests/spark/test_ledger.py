"""The database half of the Spark bulk enqueue, without Spark: staging tables, the chunked merge
and its ledger, migration 0002, and the Session's identifier slots it relies on."""

from __future__ import annotations

import uuid

import pytest

from shardq.errors import DatabaseError, SerializationConflict
from shardq.migrations import apply as migrate
from shardq.sessions.session import Session
from shardq.spark.ledger import SparkLedger, merge_chunks, stage_name
from shardq.sql import parse


def _fill(db, stage: str, rows: list[tuple[int, str, bytes, str | None]]) -> None:
    """What Spark's JDBC append does: plain INSERTs of (chunk, id, payload, dedupe_key)."""
    for chunk, task_id, payload, key in rows:
        db.stage_row(stage, chunk, task_id, payload, key)


def _ids(n: int) -> list[str]:
    return [uuid.uuid5(uuid.NAMESPACE_OID, str(i)).hex for i in range(n)]


def test_statement_slots_are_found_and_doubled_braces_are_not():
    statement = parse("-- name: x\n-- d\nSELECT '{{}}'::JSONB FROM {stage} WHERE {shard_col} = 1")["x"]
    assert statement.slots == frozenset({"stage", "shard_col"})
    assert parse("-- name: y\n-- d\nSELECT 1")["y"].templated is False


def test_identifier_slots_are_quoted_and_required(pg_db):
    stage = stage_name("slots")
    ledger = SparkLedger(pg_db.session)
    ledger.stage_create(stage, "slots")
    assert pg_db.session.fetch_one("spark_stage_rows", identifiers={"stage": stage}) == {"n": 0}
    with pytest.raises(DatabaseError, match=r"needs identifiers \['stage'\]"):
        pg_db.session.fetch_one("spark_stage_rows")
    with pytest.raises(DatabaseError):  # a name is one quoted identifier, never SQL
        pg_db.session.fetch_one("spark_stage_rows", identifiers={"stage": f"{stage}; DROP TABLE shardq_tasks"})
    assert pg_db.count() == 0
    ledger.stage_drop(stage)


def test_chunk_merge_skips_duplicates_and_live_dedupe_keys_and_runs_once(db):
    db.client.enqueue("m", b"live", dedupe_key="taken")
    ledger = SparkLedger(db.session)
    run = ledger.run_register("run", "m", 2)
    stage = ledger.stage_create(stage_name("run"), "run")
    ids = _ids(4)
    rows = [(0, ids[0], b"a", None), (0, ids[1], b"b", "taken"), (1, ids[2], b"c", "free"), (1, ids[3], b"d", None)]
    _fill(db, stage.name, rows + rows[:1] + rows[2:])  # a retried Spark task wrote some rows twice
    ledger.stage_ready_for_merge(stage.name)
    assert [ledger.chunk_merge(run, stage, c) for c in (0, 1)] == [1, 2]
    assert [ledger.chunk_merge(run, stage, c) for c in (0, 1)] == [None, None]
    payloads = sorted(bytes(r["payload"]) for r in db.tasks("payload"))
    assert payloads == [b"a", b"c", b"d", b"live"]
    assert ledger.run_progress("run") == (2, 3)
    ledger.stage_drop(stage.name)


def test_merge_workers_share_chunks_and_a_failing_callback_stops_the_merge(db):
    ledger = SparkLedger(db.session)
    run = ledger.run_register("par", "p", 8)
    stage = ledger.stage_create(stage_name("par"), "par")
    ids = _ids(80)
    _fill(db, stage.name, [(i % 8, ids[i], b"x%d" % i, None) for i in range(80)])
    ledger.stage_ready_for_merge(stage.name)
    seen = []

    def stop_after_two(chunk, tasks):
        seen.append(chunk)
        if len(seen) == 2:
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        merge_chunks(run, stage, range(8), lambda: Session(db.dsn), workers=1, on_chunk=stop_after_two)
    assert db.count() == 20
    outcome = merge_chunks(run, stage, range(8), lambda: Session(db.dsn), workers=2)
    assert (outcome.merged_chunks, outcome.skipped_chunks, outcome.tasks) == (6, 2, 60)
    assert db.count() == 80
    ledger.stage_drop(stage.name)


def test_run_keeps_the_chunk_count_of_its_first_attempt(pg_db):
    ledger = SparkLedger(pg_db.session)
    assert ledger.run_register("pin", "q", 16).chunks == 16
    assert ledger.run_register("pin", "q", 64).chunks == 16


def test_stage_drop_refuses_names_it_did_not_generate(pg_db):
    with pytest.raises(DatabaseError, match="not a shardq staging table"):
        SparkLedger(pg_db.session).stage_drop("shardq_tasks")


def test_migration_0002_downgrade_drops_ledger_and_leftover_staging_tables(pg_db):
    stage = stage_name("left")
    SparkLedger(pg_db.session).stage_create(stage, "left")
    migrate.downgrade(pg_db.dsn, target="0001")
    tables = set(pg_db.table_names_like("shardq_%"))
    assert stage not in tables and "shardq_spark_runs" not in tables and "shardq_tasks" in tables
    migrate.upgrade(pg_db.dsn)
    assert pg_db.count_spark_runs() == 0


def test_a_chunk_merge_that_keeps_failing_with_40001_is_rolled_back_whole_on_cockroachdb(db):
    # inject_retry_errors_enabled fails every statement of an explicit transaction until its epoch
    # has moved 3 times, and every new SQL transaction starts again at epoch 0
    # (pkg/sql/txn_state.go, resetForNewSQLTxn): a merge retried as ROLLBACK + BEGIN fails each
    # attempt, and must leave neither tasks nor a ledger row behind (audit F3).
    if db.dialect != "cockroachdb":
        pytest.skip("CockroachDB's inject_retry_errors_enabled drives the 40001 path")
    ledger = SparkLedger(db.session)
    run = ledger.run_register("retry", "r", 1)
    stage = ledger.stage_create(stage_name("retry"), "retry")
    _fill(db, stage.name, [(0, task_id, b"p", None) for task_id in _ids(5)])
    db.sql("SET inject_retry_errors_enabled = 'true'")
    try:
        with pytest.raises(SerializationConflict):
            ledger.chunk_merge(run, stage, 0)
    finally:
        db.sql("SET inject_retry_errors_enabled = 'false'")
    assert db.count() == 0 and ledger.run_progress("retry") == (0, 0)
    assert ledger.chunk_merge(run, stage, 0) == 5
    ledger.stage_drop(stage.name)
