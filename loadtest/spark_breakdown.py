"""Where ``enqueue_dataframe`` spends its time on PostgreSQL, phase by phase.

    python loadtest/spark_breakdown.py [--rows 1000000] [--row-key] [--writer copy|jdbc] [--rounds 2]
                                       [--dsn URL] [--out breakdown.json]

``--writer copy`` (the default writer, :mod:`shardq.spark.writer`), on a cached DataFrame of
``--rows`` rows (64-byte binary payloads), in one process, each step ``--rounds`` times, alternating:

* **spark**: the writer's frame (ids, the shuffle by chunk, the CSV/Arrow columns) handed to
  ``mapInArrow`` and only counted there: what Spark costs before any row reaches the database;
* **write**: the real write tasks into an emptied, checkpointed ``shardq_tasks``, with the seconds
  each chunk spent (summed over chunks, on the executors) numbering and assembling its rows, in
  ``COPY``, in the ledger statements and in BEGIN/COMMIT (commit: the WAL flush);
* **write without shardq_tasks_id** and **without it and the primary key**: the same, with those
  B-trees dropped (restored afterwards): what index maintenance costs.

``--writer jdbc`` is the staging path's breakdown (staging write, index, merge):

* **spark write**: ids (and the content shuffle unless ``--row-key``) and the JDBC append into
  the staging table;
* **stage index**: ``CREATE INDEX`` on the staging table's chunk column;
* **merge**: the chunked merge into ``shardq_tasks`` with the ledger, as the job runs it
  (``merge_workers`` threads), split into the merge statements, the ledger statements and the
  rest of each chunk's transaction (BEGIN, the restart guard, COMMIT: mostly the commit's WAL
  flush), summed over chunks;

then the merge again on one worker with the tasks table's indexes reduced, to attribute its time:
all indexes; without ``shardq_tasks_id``; without the id index and the primary key (left: the
heap and the partial unique dedupe index the merge arbitrates on, which these rows, having no
dedupe key, never enter). The differences are what each B-tree costs. Each variant merges the same
staged rows into an emptied, checkpointed tasks table; indexes are restored at the end.

``--repeat`` merges the same staged rows again as the job does (``merge_workers`` threads), after
the variants: the same merge without the staging table's first minutes (autovacuum, cold caches).

Without ``--dsn`` a scratch database in the embedded PostgreSQL is created and dropped.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from spark_enqueue import scratch_database  # type: ignore[import-not-found]  # by path: sys.path above

from shardq.migrations import apply as migrate
from shardq.sessions.dsn import Dsn
from shardq.sessions.session import Session
from shardq.spark import TaskColumns, WriteOptions, jdbc_target, spark_session
from shardq.spark import frame as frame_module
from shardq.spark.job import _write
from shardq.spark.ledger import SparkLedger, merge_chunks, stage_name

INDEX_VARIANTS = {
    "all indexes": [],
    "without shardq_tasks_id": ["DROP INDEX shardq_tasks_id"],
    "without id index and primary key": [
        "DROP INDEX shardq_tasks_id",
        "ALTER TABLE shardq_tasks DROP CONSTRAINT shardq_tasks_pkey",
    ],
}
RESTORE = ["CREATE UNIQUE INDEX IF NOT EXISTS shardq_tasks_id ON shardq_tasks (id)"]


class StatementClock:
    """Seconds spent in each named statement (summed over threads), by wrapping Session."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.lock = threading.Lock()
        self._originals: dict[str, object] = {}

    def __enter__(self) -> StatementClock:
        for method in ("execute", "fetch_one", "fetch_all"):
            original = getattr(Session, method)
            self._originals[method] = original

            def timed(session, name, *args, _original=original, **kwargs):
                started = time.perf_counter()
                try:
                    return _original(session, name, *args, **kwargs)
                finally:
                    with self.lock:
                        self.seconds[name] += time.perf_counter() - started

            setattr(Session, method, timed)
        return self

    def __exit__(self, *exc) -> None:
        for method, original in self._originals.items():
            setattr(Session, method, original)


def empty_tasks(dsn: Dsn) -> None:
    with Session(dsn) as session:
        session.execute_raw("TRUNCATE shardq_tasks")
        session.execute_raw("DELETE FROM shardq_spark_chunks")
        session.execute_raw("VACUUM ANALYZE shardq_tasks")
        session.execute_raw("CHECKPOINT")


def timed_merge(dsn: Dsn, run, stage, chunks: int, workers: int) -> dict:
    empty_tasks(dsn)
    with StatementClock() as clock:
        started = time.perf_counter()
        outcome = merge_chunks(
            run, stage, range(chunks), lambda: Session(dsn, application_name="shardq-spark"), workers=workers
        )
        wall = time.perf_counter() - started
    merge = clock.seconds["spark_chunk_merge"]
    ledger = sum(clock.seconds[n] for n in ("spark_chunk_take", "spark_chunk_record"))
    statements = sum(clock.seconds.values())
    return {
        "wall_seconds": round(wall, 3),
        "tasks": outcome.tasks,
        "workers": workers,
        "merge_statement_seconds": round(merge, 3),
        "ledger_statement_seconds": round(ledger, 3),
        "other_statement_seconds": round(statements - merge - ledger, 3),
        # per thread: wall time not spent in statements (BEGIN/COMMIT, Python)
        "transaction_rest_seconds": round(wall * workers - statements, 3),
    }


def measure(rows: int, dsn: Dsn, spark, *, row_key: bool, chunks: int, workers: int, repeat: bool) -> dict:
    from pyspark.sql import functions as F

    migrate.upgrade(dsn)
    df = spark.range(rows).select(
        F.unhex(F.sha2(F.col("id").cast("string"), 256)).alias("payload"), F.col("id").alias("n")
    )
    df = df.select(F.concat("payload", "payload").alias("payload"), "n")
    df = (df if row_key else df.select("payload")).cache()
    df.count()
    columns = TaskColumns(row_key="n" if row_key else None)
    options = WriteOptions(chunks=chunks)
    run_id = f"breakdown-{uuid.uuid4().hex[:8]}"
    # warm-up: a small write through the same path (the first JDBC write in a JVM is slower)
    with Session(dsn) as session:
        ledger = SparkLedger(session)
        warm = ledger.stage_create(stage_name("warm"), "warm")
        _write(
            frame_module.stage_frame(df.limit(20_000), queue="lt", run_id="warm", chunks=chunks, columns=columns),
            warm.name,
            jdbc_target(dsn),
            options,
        )
        ledger.stage_drop(warm.name)
        run = ledger.run_register(run_id, "lt", chunks)
        stage = ledger.stage_create(stage_name(run_id), run_id)
    out: dict = {
        "rows": rows,
        "row_key": row_key,
        "chunks": chunks,
        "partitions": options.partitions,
        "batch_size": options.batch_size,
    }
    started = time.perf_counter()
    _write(
        frame_module.stage_frame(df, queue="lt", run_id=run_id, chunks=chunks, columns=columns),
        stage.name,
        jdbc_target(dsn),
        options,
    )
    out["spark_write_seconds"] = round(time.perf_counter() - started, 3)
    with Session(dsn) as session:
        ledger = SparkLedger(session)
        started = time.perf_counter()
        ledger.stage_ready_for_merge(stage.name)
        out["stage_index_seconds"] = round(time.perf_counter() - started, 3)
        session.execute_raw(f'ANALYZE "{stage.name}"')
    out["merge"] = timed_merge(dsn, run, stage, chunks, workers)
    out["merge_one_worker"] = {}
    try:
        for variant, ddl in INDEX_VARIANTS.items():
            with Session(dsn) as session:
                for statement in RESTORE:
                    session.execute_raw(statement)
                if "primary key" not in variant:
                    session.execute_raw(
                        "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'shardq_tasks_pkey') "
                        "THEN ALTER TABLE shardq_tasks ADD CONSTRAINT shardq_tasks_pkey "
                        "PRIMARY KEY (bucket, queue, rank, exec_time, id); END IF; END $$"
                    )
                for statement in ddl:
                    session.execute_raw(statement)
            out["merge_one_worker"][variant] = timed_merge(dsn, run, stage, chunks, 1)
    finally:
        with Session(dsn) as session:
            empty_tasks(dsn)
            session.execute_raw(
                "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'shardq_tasks_pkey') "
                "THEN ALTER TABLE shardq_tasks ADD CONSTRAINT shardq_tasks_pkey "
                "PRIMARY KEY (bucket, queue, rank, exec_time, id); END IF; END $$"
            )
            for statement in RESTORE:
                session.execute_raw(statement)
    if repeat:
        out["merge_again"] = timed_merge(dsn, run, stage, chunks, workers)
    with Session(dsn) as session:
        SparkLedger(session).stage_drop(stage.name)
    return out


def _count_only(batches):
    """mapInArrow body that only counts what Spark hands over (the writer's report schema)."""
    import pyarrow as pa

    rows = sum(batch.num_rows for batch in batches)
    yield pa.RecordBatch.from_pydict(
        {
            "chunk": pa.array([0], pa.int32()),
            "tasks": pa.array([0], pa.int64()),
            "rows": pa.array([rows], pa.int64()),
            **{f"{n}_seconds": pa.array([0.0], pa.float64()) for n in ("assemble", "copy", "statement", "commit")},
        }
    )


def _restore_indexes(dsn: Dsn) -> None:
    with Session(dsn) as session:
        session.execute_raw(
            "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'shardq_tasks_pkey') "
            "THEN ALTER TABLE shardq_tasks ADD CONSTRAINT shardq_tasks_pkey "
            "PRIMARY KEY (bucket, queue, rank, exec_time, id); END IF; END $$"
        )
        for statement in RESTORE:
            session.execute_raw(statement)


def measure_copy(rows: int, dsn: Dsn, spark, *, row_key: bool, chunks: int, partitions: int, rounds: int) -> dict:
    """The COPY writer's steps, ``rounds`` times each, alternating (see the module docstring)."""
    from pyspark.sql import functions as F

    from shardq.spark import writer

    migrate.upgrade(dsn)
    df = spark.range(rows).select(
        F.unhex(F.sha2(F.col("id").cast("string"), 256)).alias("payload"), F.col("id").alias("n")
    )
    df = df.select(F.concat("payload", "payload").alias("payload"), "n")
    df = (df if row_key else df.select("payload")).cache()
    df.count()
    columns = TaskColumns(row_key="n" if row_key else None)
    mapped = set(columns.mapped())

    def frame(data, run_id: str):
        staged = frame_module.stage_frame(
            data, queue="lt", run_id=run_id, chunks=chunks, columns=columns, cluster=partitions
        )
        return writer.copy_frame(staged, mapped)

    def write(data, variant: str) -> dict:
        empty_tasks(dsn)
        run_id = f"breakdown-{uuid.uuid4().hex[:8]}"
        with Session(dsn) as session:
            SparkLedger(session).run_register(run_id, "lt", chunks)
        copy_rows, plain = frame(data, run_id)
        spec = writer.WriterSpec(
            dsn, run_id, "lt", chunks, plain=plain, keyed=False, max_attempts_mapped=False, numbered=not row_key
        )
        started = time.perf_counter()
        report = writer.run_writer(copy_rows, spec)
        wall = time.perf_counter() - started
        out = {"variant": variant, "wall_seconds": round(wall, 3), "tasks": sum(r["tasks"] for r in report)}
        for name in ("assemble", "copy", "statement", "commit"):
            out[f"{name}_seconds"] = round(sum(r[f"{name}_seconds"] for r in report), 3)
        return out

    write(df.limit(20_000), "warm-up")
    steps: dict[str, list] = {
        "spark": [],
        "write": [],
        "write without shardq_tasks_id": [],
        "write without id index and primary key": [],
    }
    try:
        for _ in range(rounds):
            copy_rows, _ = frame(df, f"spark-{uuid.uuid4().hex[:8]}")
            started = time.perf_counter()
            copy_rows.mapInArrow(_count_only, writer.REPORT_SCHEMA).collect()
            steps["spark"].append(round(time.perf_counter() - started, 3))
            for variant, ddl in INDEX_VARIANTS.items():
                _restore_indexes(dsn)
                with Session(dsn) as session:
                    for statement in ddl:
                        session.execute_raw(statement)
                name = "write" if variant == "all indexes" else f"write {variant}"
                steps[name].append(write(df, variant))
    finally:
        empty_tasks(dsn)
        _restore_indexes(dsn)
    return {
        "rows": rows,
        "row_key": row_key,
        "chunks": chunks,
        "partitions": partitions,
        "rounds": rounds,
        "writer": "copy",
        **steps,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--row-key", action="store_true")
    parser.add_argument("--chunks", type=int, default=64)
    parser.add_argument("--merge-workers", type=int, default=WriteOptions.merge_workers)
    parser.add_argument("--repeat", action="store_true")
    parser.add_argument("--writer", choices=("copy", "jdbc"), default="copy")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=WriteOptions.partitions)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--dsn", default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    drop = None
    if args.dsn:
        dsn = Dsn.parse(args.dsn)
    else:
        dsn, drop = scratch_database()
    spark = spark_session(master=args.master, conf={"spark.driver.memory": "2g"})
    try:
        if args.writer == "copy":
            figures = measure_copy(
                args.rows,
                dsn,
                spark,
                row_key=args.row_key,
                chunks=args.chunks,
                partitions=args.partitions,
                rounds=args.rounds,
            )
        else:
            figures = measure(
                args.rows,
                dsn,
                spark,
                row_key=args.row_key,
                chunks=args.chunks,
                workers=args.merge_workers,
                repeat=args.repeat,
            )
    finally:
        spark.stop()
        if drop:
            drop()
    print(json.dumps(figures, indent=2))
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
