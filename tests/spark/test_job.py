"""Spark bulk enqueue against the embedded PostgreSQL (local[2] Spark, one session for the module).

Skips cleanly when pyspark, Java 17+ or the PostgreSQL JDBC driver is missing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import subprocess
import sys

import pytest

from shardq.errors import (
    DatabaseError,
    DatabaseUnavailable,
    InvalidInput,
    InvalidTaskFrame,
    QueuePaused,
    SparkSetupError,
)
from shardq.models.leases import Fenced

pytestmark = pytest.mark.spark

pyspark = pytest.importorskip("pyspark")

from shardq.spark import TaskColumns, WriteOptions, derive_run_id, enqueue_dataframe, find_jdbc_driver, gc, jdbc_target
from shardq.spark import frame as frame_module
from shardq.spark import jdbc as jdbc_module
from shardq.spark.ledger import SparkLedger, merge_chunks, stage_name
from tests.support.spark import chunks_fail_after

SMALL = WriteOptions(partitions=2, chunks=8, merge_workers=2)


def _frame(spark, n: int, *, copies: int = 1, prefix: str = "task"):
    from pyspark.sql import functions as F

    return spark.range(n * copies).select(
        F.concat(F.lit(prefix + "-"), (F.col("id") % n).cast("string")).alias("payload")
    )


def _payloads(db, queue: str) -> list[bytes]:
    rows = db.tasks("payload", queue=queue)
    return sorted(bytes(r["payload"]) for r in rows)


def _stages(db) -> list[str]:
    return db.table_names_like("shardq_stage_%")


def test_enqueue_dataframe_inserts_every_row_once_with_its_payload(spark, pg_db):
    df = _frame(spark, 300, copies=2)  # every payload twice: identical rows are distinct tasks
    result = enqueue_dataframe(df, "bulk", run_id="r1", dsn=pg_db.dsn, options=SMALL)
    assert (result.enqueued, result.run_tasks, result.merged_chunks, result.chunks) == (600, 600, 8, 8)
    assert _payloads(pg_db, "bulk") == sorted(f"task-{i % 300}".encode() for i in range(600))
    assert pg_db.count("shardq_queues") == 1
    row = pg_db.first_task_due()
    assert row == {"state": "ready", "attempts": 0, "max_attempts": 25, "due": True}
    assert _stages(pg_db) == []  # the attempt dropped its staging table
    assert pg_db.count_spark_stages() == 0


def test_binary_payload_and_optional_columns_round_trip(spark, pg_db):
    from pyspark.sql.types import (
        BinaryType,
        IntegerType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    later = dt.datetime(2031, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    schema = StructType(
        [
            StructField("body", BinaryType()),
            StructField("when", TimestampType()),
            StructField("key", StringType()),
            StructField("tries", IntegerType()),
            StructField("prio", IntegerType()),
        ]
    )
    rows = [(b"\x00\xffraw", later, "k1", 3, 7), (b"plain", None, None, None, -5), (b"dup-key", None, "k1", None, None)]
    df = spark.createDataFrame(rows, schema)
    columns = TaskColumns(payload="body", run_at="when", dedupe_key="key", max_attempts="tries", priority="prio")
    result = enqueue_dataframe(df, "typed", run_id="typed", dsn=pg_db.dsn, columns=columns, options=SMALL)
    assert result.enqueued == 2  # rows sharing dedupe key k1 become one task
    got = {
        bytes(r["payload"]): r
        for r in pg_db.tasks("payload", "state", "exec_time", "dedupe_key", "max_attempts", "priority", queue="typed")
    }
    keyed = got.get(b"\x00\xffraw") or got[b"dup-key"]
    assert keyed["dedupe_key"] == "k1"
    plain = got[b"plain"]
    assert (plain["state"], plain["max_attempts"], plain["priority"], plain["dedupe_key"]) == ("ready", 25, -5, None)
    if b"\x00\xffraw" in got:
        raw = got[b"\x00\xffraw"]
        assert (raw["state"], raw["exec_time"], raw["max_attempts"], raw["priority"]) == ("scheduled", later, 3, 7)


def test_delay_column_schedules_tasks_and_live_dedupe_keys_are_skipped(spark, pg_db):
    pg_db.client.enqueue("sched", b"already", dedupe_key="taken")
    df = spark.createDataFrame([("a", 3600.0, "taken"), ("b", 3600.0, "free")], "p string, d double, k string")
    columns = TaskColumns(payload="p", delay="d", dedupe_key="k")
    result = enqueue_dataframe(df, "sched", run_id="sched", dsn=pg_db.dsn, columns=columns, options=SMALL)
    assert result.enqueued == 1
    row = pg_db.due_later_than(b"b", 59 * 60)
    assert row == [{"later": True}]
    assert _payloads(pg_db, "sched") == [b"already", b"b"]


def test_exclusive_key_column_keeps_one_active_task_per_key_and_backlogs_the_rest(spark, pg_db):
    pg_db.client.enqueue("excl", b"busy", exclusive_key="k0")  # k0 is taken before the job runs
    rows = [(f"p{i}", f"k{i % 3}", i) for i in range(12)] + [("free", None, 0)]
    df = spark.createDataFrame(rows, "p string, k string, prio int")
    columns = TaskColumns(payload="p", exclusive_key="k", priority="prio")
    result = enqueue_dataframe(df, "excl", run_id="excl", dsn=pg_db.dsn, columns=columns, options=SMALL)
    assert result.enqueued == 13
    counts = pg_db.count_by_exclusive_key("excl")
    assert counts == {
        ("k0", False): 1,
        ("k0", True): 4,
        ("k1", False): 1,
        ("k1", True): 3,
        ("k2", False): 1,
        ("k2", True): 3,
        (None, False): 1,
    }
    assert pg_db.running_of_exclusive_key("k0") == [{"payload": b"busy"}]
    again = enqueue_dataframe(df, "excl", run_id="excl", dsn=pg_db.dsn, columns=columns, options=SMALL)
    assert again.enqueued == 0 and pg_db.count() == 14
    # The backlog releases in priority order once the active task is acked.
    busy = pg_db.task_ids_of_payload(b"busy")[0]
    pg_db.client.cancel(str(busy))
    assert pg_db.running_of_exclusive_key("k0") == [{"payload": b"p0"}]
    bad = spark.createDataFrame([("p", "")], "p string, k string")
    with pytest.raises(InvalidTaskFrame, match="exclusive key is empty"):
        enqueue_dataframe(
            bad,
            "excl",
            run_id="bad-key",
            dsn=pg_db.dsn,
            columns=TaskColumns(payload="p", exclusive_key="k"),
            options=SMALL,
        )


def test_paused_queue_refuses_and_the_rerun_after_resuming_enqueues_everything(spark, pg_db):
    df = _frame(spark, 40)
    enqueue_dataframe(df.limit(1), "paused", run_id="first", dsn=pg_db.dsn, options=SMALL)
    pg_db.set_paused_enqueue("paused", True)
    with pytest.raises(QueuePaused):
        enqueue_dataframe(df, "paused", run_id="p", dsn=pg_db.dsn, options=SMALL)
    pg_db.set_paused_enqueue("paused", False)
    assert enqueue_dataframe(df, "paused", run_id="p", dsn=pg_db.dsn, options=SMALL).enqueued == 40


def test_rerun_after_a_failed_write_enqueues_each_task_once(spark, pg_db):
    from pyspark.sql import functions as F

    good = _frame(spark, 400)
    # The same rows, but one row's check fails inside the Spark job after other partitions wrote.
    bad = good.withColumn("payload", F.when(F.col("payload") == "task-399", F.lit(None)).otherwise(F.col("payload")))
    with pytest.raises(InvalidTaskFrame, match="payload is NULL"):
        enqueue_dataframe(bad, "rw", run_id="rw", dsn=pg_db.dsn, options=SMALL)
    assert pg_db.count() == 0 and _stages(pg_db) == []
    result = enqueue_dataframe(good, "rw", run_id="rw", dsn=pg_db.dsn, options=SMALL)
    assert result.enqueued == 400
    assert _payloads(pg_db, "rw") == sorted(f"task-{i}".encode() for i in range(400))


def test_rerun_after_crash_mid_merge_and_acks_in_between_leaves_each_task_once(spark, pg_db):
    df = _frame(spark, 500, copies=2)  # 1000 tasks, payloads in pairs
    merged = []

    def crash_after_three(chunk, tasks):
        merged.append(chunk)
        if len(merged) == 3:
            raise RuntimeError("driver killed")

    # The staging path: on_chunk runs between its chunk merges (the COPY writer's chunks commit on
    # the executors; its version of this test fails a chunk in the database instead, below).
    options = WriteOptions(partitions=2, chunks=8, merge_workers=1, writer="jdbc")
    with pytest.raises(RuntimeError, match="driver killed"):
        enqueue_dataframe(df, "crash", run_id="crash", dsn=pg_db.dsn, options=options, on_chunk=crash_after_three)
    first = pg_db.count()
    assert 0 < first < 1000
    # Consumers ack some of the first attempt's tasks before the re-run.
    claimed = pg_db.store.task_claim_batch(0, "crash", 50, 30) + pg_db.store.task_claim_batch(1, "crash", 50, 30)
    acked = pg_db.store.task_ack_many([Fenced(t.key, t.lease_token) for t in claimed])
    assert acked
    result = enqueue_dataframe(df, "crash", run_id="crash", dsn=pg_db.dsn, options=options)
    assert result.skipped_chunks == 3 and result.merged_chunks == 5 and result.writer == "jdbc"
    assert result.run_tasks == 1000
    assert pg_db.count() == 1000 - len(acked)
    remaining = _payloads(pg_db, "crash")
    acked_payloads = sorted(t.payload for t in claimed)
    assert sorted(remaining + acked_payloads) == sorted(f"task-{i % 500}".encode() for i in range(1000))
    again = enqueue_dataframe(df, "crash", run_id="crash", dsn=pg_db.dsn, options=options)
    assert (again.enqueued, again.merged_chunks, again.staged_rows, again.writer) == (0, 0, 0, "")
    assert pg_db.count() == 1000 - len(acked)


@pytest.mark.parametrize("writer", ["copy", "jdbc"])
def test_rerun_after_a_chunk_failed_mid_write_and_acks_in_between_leaves_each_task_once(spark, pg_db, writer):
    df = _frame(spark, 500, copies=2)  # 1000 tasks, payloads in pairs
    options = WriteOptions(partitions=1, chunks=8, merge_workers=1, writer=writer)  # chunks in order
    with chunks_fail_after(pg_db, "mid", 3), pytest.raises(DatabaseError, match="refused by the test"):
        enqueue_dataframe(df, "mid", run_id="mid", dsn=pg_db.dsn, options=options)
    assert pg_db.count_spark_chunks("mid") == 3
    first = pg_db.count()
    assert 0 < first < 1000
    claimed = pg_db.store.task_claim_batch(0, "mid", 50, 30) + pg_db.store.task_claim_batch(1, "mid", 50, 30)
    acked = pg_db.store.task_ack_many([Fenced(t.key, t.lease_token) for t in claimed])
    assert acked
    result = enqueue_dataframe(df, "mid", run_id="mid", dsn=pg_db.dsn, options=options)
    assert (result.skipped_chunks, result.merged_chunks, result.run_tasks) == (3, 5, 1000)
    assert result.enqueued == 1000 - first
    assert pg_db.count() == 1000 - len(acked)
    remaining = _payloads(pg_db, "mid")
    assert sorted(remaining + [t.payload for t in claimed]) == sorted(f"task-{i % 500}".encode() for i in range(1000))
    again = enqueue_dataframe(df, "mid", run_id="mid", dsn=pg_db.dsn, options=options)
    assert (again.enqueued, again.merged_chunks) == (0, 0) and pg_db.count() == 1000 - len(acked)


def test_a_queue_paused_while_the_copy_writer_runs_stops_it_and_the_rerun_finishes(spark, pg_db):
    df = _frame(spark, 300)
    options = WriteOptions(partitions=1, chunks=8, writer="copy")
    with chunks_fail_after(pg_db, "pause-mid", 2, pause_queue="pmid"), pytest.raises(QueuePaused, match="pmid"):
        enqueue_dataframe(df, "pmid", run_id="pause-mid", dsn=pg_db.dsn, options=options)
    # The pause rolled back with the chunk that saw it; the two chunks before it stay written.
    assert pg_db.queue_columns("pmid", "paused_enqueue") == [{"paused_enqueue": False}]
    progress = pg_db.spark_progress("pause-mid")
    assert progress["n"] == 2 and pg_db.count() == progress["t"] and 0 < progress["t"] < 300
    result = enqueue_dataframe(df, "pmid", run_id="pause-mid", dsn=pg_db.dsn, options=options)
    assert (result.skipped_chunks, result.merged_chunks, result.run_tasks) == (2, 6, 300)
    assert _payloads(pg_db, "pmid") == sorted(f"task-{i}".encode() for i in range(300))


def test_copy_writer_ids_and_chunks_are_stage_frames_and_identical_rows_share_a_chunk(spark, pg_db):
    from pyspark.sql import functions as F

    base = _frame(spark, 200, copies=3)  # each payload three times
    df = base.withColumn("k", F.when(F.col("payload").endswith("7"), F.col("payload")))  # some rows keyed
    columns = TaskColumns(dedupe_key="k")
    copy = dataclasses.replace(SMALL, writer="copy")
    result = enqueue_dataframe(df, "ids", run_id="ids", dsn=pg_db.dsn, columns=columns, options=copy)
    staged = frame_module.stage_frame(df, queue="ids", run_id="ids", chunks=8, columns=columns).collect()
    assert result.enqueued == len({r["id"] for r in staged}) == 180 * 3 + 20
    got = sorted(r["id"].hex for r in pg_db.tasks("id", queue="ids"))
    assert got == sorted({r["id"] for r in staged})
    per_chunk = pg_db.spark_rows_merged("ids")
    counted: dict[int, set] = {}
    for r in staged:
        counted.setdefault(r["chunk"], set()).add(r["id"])
    assert per_chunk == {c: len(ids) for c, ids in counted.items()}
    by_payload: dict[str, set] = {}
    for r in staged:
        by_payload.setdefault(r["payload"], set()).add(r["chunk"])
    assert all(len(chunks) == 1 for chunks in by_payload.values())
    # Plain rows (straight into the tasks table, the writer hashing the copies' content again),
    # with a priority and max_attempts in the content.
    plain = base.select(
        "payload",
        (F.length("payload") % 3).alias("prio"),
        F.when(F.col("payload").endswith("1"), F.lit(5)).alias("tries"),
    )
    columns = TaskColumns(priority="prio", max_attempts="tries")
    result = enqueue_dataframe(plain, "plain", run_id="plain", dsn=pg_db.dsn, columns=columns, options=copy)
    staged = frame_module.stage_frame(plain, queue="plain", run_id="plain", chunks=8, columns=columns).collect()
    assert result.enqueued == len(staged) == 600
    got = sorted(r["id"].hex for r in pg_db.tasks("id", queue="plain"))
    assert got == sorted(r["id"] for r in staged)


def test_a_run_registered_before_chunking_schemes_keeps_its_chunks(spark, pg_db):
    """A run whose first attempt ran an older shardq (no scheme row, chunks = ranges of each row's
    own id) is finished on the staging path with that chunking, so no row changes chunk."""
    from shardq.spark.frame import CHUNK_BY_ID, CHUNK_BY_KEY

    pg_db.add_spark_run("legacy", "old", 8)
    df = _frame(spark, 100, copies=3)
    one_worker = WriteOptions(partitions=2, chunks=8, merge_workers=1)  # writer "auto": COPY, if it could
    merged = []

    def stop_after_three(chunk, tasks):
        merged.append(chunk)
        if len(merged) == 3:
            raise RuntimeError("stopped")

    with pytest.raises(RuntimeError, match="stopped"):
        enqueue_dataframe(df, "old", run_id="legacy", dsn=pg_db.dsn, options=one_worker, on_chunk=stop_after_three)
    result = enqueue_dataframe(df, "old", run_id="legacy", dsn=pg_db.dsn, options=one_worker)
    assert (result.skipped_chunks, result.merged_chunks, result.run_tasks) == (3, 5, 300) and pg_db.count() == 300

    def counts(chunking):
        rows = frame_module.stage_frame(
            df, queue="old", run_id="legacy", chunks=8, columns=TaskColumns(), chunking=chunking
        ).collect()
        out: dict[int, int] = {}
        for r in rows:
            out[r["chunk"]] = out.get(r["chunk"], 0) + 1
        return out

    ledger = pg_db.spark_rows_merged("legacy", merged_only=False)
    assert ledger == counts(CHUNK_BY_ID) != counts(CHUNK_BY_KEY)


def test_duplicate_rows_in_staging_and_overlapping_merges_insert_each_task_once(spark, pg_db):
    """What a retried or speculative Spark task leaves behind: the same rows twice in staging,
    and two attempts merging the same chunks at once."""
    from shardq.sessions.session import Session
    from shardq.spark.job import _write

    df = _frame(spark, 200)
    ledger = SparkLedger(pg_db.session)
    run = ledger.run_register("dup", "dup", 4)
    stage = ledger.stage_create(stage_name("dup"), "dup")
    rows = frame_module.stage_frame(df, queue="dup", run_id="dup", chunks=4, columns=TaskColumns())
    _write(rows, stage.name, jdbc_target(pg_db.dsn), SMALL)
    _write(rows, stage.name, jdbc_target(pg_db.dsn), SMALL)
    ledger.stage_ready_for_merge(stage.name)
    assert ledger.stage_rows(stage.name) == 400
    outcomes = [merge_chunks(run, stage, range(4), lambda: Session(pg_db.dsn), workers=2) for _ in range(2)]
    assert outcomes[0].tasks == 200 and outcomes[1].tasks == 0 and outcomes[1].skipped_chunks == 4
    assert _payloads(pg_db, "dup") == sorted(f"task-{i}".encode() for i in range(200))
    restarted = dataclasses.replace(stage, server_started=dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
    with pytest.raises(DatabaseUnavailable, match="restarted"):
        SparkLedger(pg_db.session).chunk_merge(dataclasses.replace(run, run_id="other"), restarted, 0)
    assert pg_db.count_spark_chunk_rows("other") == 0
    ledger.stage_drop(stage.name)


def test_ids_do_not_depend_on_partitioning(spark, pg_db):
    from pyspark.sql import functions as F

    df = _frame(spark, 100, copies=3)
    ids = []
    for parts in (1, 5):
        staged = frame_module.stage_frame(
            df.repartition(parts), queue="q", run_id="same", chunks=8, columns=TaskColumns()
        )
        ids.append(sorted((r["id"], r["chunk"]) for r in staged.collect()))
    assert ids[0] == ids[1] and len(set(ids[0])) == 300
    # Identical rows of which one has a dedupe key: the others' numbers do not depend on it.
    keyed = df.withColumn("k", F.when(F.rand(seed=1) < 0.3, F.concat(F.col("payload"), F.lit("-k"))))
    keyed = keyed.cache()
    sets = []
    for parts in (1, 5, 7):
        staged = frame_module.stage_frame(
            keyed.repartition(parts), queue="q", run_id="same", chunks=8, columns=TaskColumns(dedupe_key="k")
        )
        sets.append(sorted(r["id"] for r in staged.collect()))
    assert sets[0] == sets[1] == sets[2]
    keyed.unpersist()


def test_run_id_is_pinned_to_its_queue(spark, pg_db):
    df = _frame(spark, 10)
    enqueue_dataframe(df, "one", run_id="pinned", dsn=pg_db.dsn, options=SMALL)
    with pytest.raises(InvalidInput, match="belongs to queue 'one'"):
        enqueue_dataframe(df, "two", run_id="pinned", dsn=pg_db.dsn, options=SMALL)


def test_missing_column_wrong_type_and_bad_options_are_clear_errors(spark, pg_db):
    df = spark.createDataFrame([(1, "x")], "n int, s string")
    with pytest.raises(InvalidTaskFrame, match=r"payload column 'payload' is not in the DataFrame \(columns: n, s\)"):
        enqueue_dataframe(df, "q", run_id="e1", dsn=pg_db.dsn)
    with pytest.raises(InvalidTaskFrame, match="payload column 'n' has type integer"):
        enqueue_dataframe(df, "q", run_id="e2", dsn=pg_db.dsn, columns=TaskColumns(payload="n"))
    with pytest.raises(InvalidTaskFrame, match="run_at column 'n' has type integer; accepted: timestamp, string"):
        enqueue_dataframe(df, "q", run_id="e3", dsn=pg_db.dsn, columns=TaskColumns(payload="s", run_at="n"))
    ntz = spark.sql("SELECT 'p' AS payload, TIMESTAMP_NTZ'2030-01-01 00:00:00' AS at")
    with pytest.raises(InvalidTaskFrame, match="TIMESTAMP_NTZ"):
        enqueue_dataframe(ntz, "q", run_id="e4", dsn=pg_db.dsn, columns=TaskColumns(run_at="at"))
    with pytest.raises(InvalidInput, match="multiple of 128"):
        enqueue_dataframe(
            df, "q", run_id="e5", dsn=pg_db.dsn, columns=TaskColumns(payload="s"), options=WriteOptions(batch_size=1000)
        )
    bad_value = spark.createDataFrame([("p", -1)], "payload string, tries int")
    with pytest.raises(InvalidTaskFrame, match="max_attempts below 1"):
        enqueue_dataframe(
            bad_value, "q", run_id="e6", dsn=pg_db.dsn, columns=TaskColumns(max_attempts="tries"), options=SMALL
        )
    assert pg_db.count() == 0


def test_missing_jdbc_driver_is_a_setup_error(tmp_path, monkeypatch):
    monkeypatch.delenv("SHARDQ_JDBC_JAR", raising=False)
    monkeypatch.setenv("MAVEN_REPO_LOCAL", str(tmp_path))
    with pytest.raises(SparkSetupError, match=r"libpostgresql-jdbc-java.*~/\.m2.*Maven Central"):
        find_jdbc_driver(debian_jar=tmp_path / "none.jar", reachable=lambda: False)
    with pytest.raises(SparkSetupError, match="does not exist"):
        find_jdbc_driver(tmp_path / "missing.jar")
    assert find_jdbc_driver(debian_jar=tmp_path / "none.jar", reachable=lambda: True).packages.startswith(
        "org.postgresql:postgresql:"
    )
    jar = tmp_path / "org/postgresql/postgresql/42.7.9/postgresql-42.7.9.jar"
    jar.parent.mkdir(parents=True)
    jar.write_bytes(b"")
    newer = tmp_path / "org/postgresql/postgresql/42.7.10/postgresql-42.7.10.jar"
    newer.parent.mkdir(parents=True)
    newer.write_bytes(b"")
    assert find_jdbc_driver(debian_jar=tmp_path / "none.jar").jar == newer


def test_session_without_the_driver_is_refused_before_anything_is_written(spark, pg_db, monkeypatch):
    monkeypatch.setattr(jdbc_module, "DRIVER_CLASS", "org.example.NoSuchDriver")
    with pytest.raises(SparkSetupError, match="not on this SparkSession's classpath"):
        jdbc_module.check_driver_loadable(spark)


def test_missing_java_is_a_setup_error(monkeypatch, tmp_path):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SparkSetupError, match="Java not found"):
        jdbc_module.find_java()


def test_gc_drops_stale_staging_tables(spark, pg_db):
    ledger = SparkLedger(pg_db.session)
    ledger.stage_create(stage_name("left-behind"), "left-behind")
    assert gc(pg_db.dsn).stages_dropped == 0  # younger than a day
    assert gc(pg_db.dsn, stage_max_age_seconds=0).stages_dropped == 1
    assert _stages(pg_db) == []


def test_jdbc_url_carries_batch_rewrite_and_rejects_unix_sockets():
    from shardq.sessions.dsn import Dsn

    target = jdbc_target(Dsn.parse("postgresql://u:secret@127.0.0.1:5433/db?sslmode=require"))
    assert target.url.startswith("jdbc:postgresql://127.0.0.1:5433/db?reWriteBatchedInserts=true&")
    assert "sslmode=require" in target.url and "secret" not in repr(target)
    with pytest.raises(InvalidInput, match="TCP"):
        jdbc_target(Dsn.parse("host=/var/run/postgresql dbname=x"))


def test_derived_run_id_follows_input_files(tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    (data / "part-0.csv").write_text("payload\na\n")
    (data / "_SUCCESS").write_text("")
    first = derive_run_id("q", data, "csv", TaskColumns())
    assert derive_run_id("q", data, "csv", TaskColumns()) == first
    assert derive_run_id("other", data, "csv", TaskColumns()) != first
    (data / "part-0.csv").write_text("payload\nab\n")
    assert derive_run_id("q", data, "csv", TaskColumns()) != first


def test_cli_spark_enqueue_twice_over_the_same_input_is_a_rerun(spark, pg_db, tmp_path):
    from click.testing import CliRunner

    from shardq.cli.main import cli

    data = tmp_path / "tasks.csv"
    data.write_text("body,key\n" + "".join(f"job-{i},{'k' if i == 0 else ''}\n" for i in range(50)))
    args = [
        "--dsn",
        pg_db.dsn.conninfo,
        "spark-enqueue",
        "csvq",
        "--input",
        str(data),
        "--payload-column",
        "body",
        "--dedupe-column",
        "key",
        "--partitions",
        "2",
        "--chunks",
        "4",
    ]
    first = CliRunner().invoke(cli, args)
    assert first.exit_code == 0, first.output
    assert "enqueued 50 into csvq" in first.output
    second = CliRunner().invoke(cli, args)
    assert second.exit_code == 0, second.output
    assert "enqueued 0 into csvq" in second.output and "4 merged before" in second.output
    assert pg_db.count() == 50
    missing = CliRunner().invoke(cli, args[:6] + ["--payload-column", "nope"])
    assert missing.exit_code == 2 and "payload column 'nope' is not in the DataFrame" in missing.output


def test_demo_pipeline_processes_every_task_despite_a_killed_worker(spark, pg_db):
    from shardq.cli.demo import run_demo

    report = run_demo(tasks=3000, workers=2, dsn=pg_db.dsn, timeout_seconds=120)
    assert report.passed, report.problems
    assert report.killed_worker is not None
    assert (report.never_started, report.left_in_queue, report.dead) == (0, 0, 0)
    assert report.latency_p50 is not None and report.enqueue_rate > 0 and report.drain_rate > 0
    assert report.writer == "copy"  # PostgreSQL with pyarrow: the executors COPY


def test_a_new_spark_session_prints_none_of_sparks_start_up_log_lines():
    # A process of its own: the JVM's logging is set when it starts, and the tests' JVM is running.
    started = subprocess.run(
        [sys.executable, "-c", "from shardq.spark.jdbc import spark_session; spark_session(app_name='quiet').stop()"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert started.returncode == 0, started.stderr
    for chatter in ("log4j profile", "Setting default log level", "NativeCodeLoader", " WARN "):
        assert chatter not in started.stderr, started.stderr
