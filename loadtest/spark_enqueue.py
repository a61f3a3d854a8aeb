"""Spark -> shardq bulk enqueue throughput, against Spark appending the same rows to a plain table.

    python loadtest/spark_enqueue.py [--rows 1000000] [--rounds 2] [--dsn URL] [--out results.json]

Both paths run in the same process, on the same cached DataFrame (``--rows`` rows, a 64-byte
binary payload each), with the same JDBC settings (partitions, batch size,
``reWriteBatchedInserts``, autocommit), alternating, after one warm-up write of each on a tenth
of the rows (at least 20k): the first JDBC write in a fresh JVM is 30-40 % slower, and the first
shuffle-heavy jobs 1.5-2x (Spark alone on the same 1M rows, three times in a fresh JVM: 6.1, 4.1,
3.1 s), so with a 20k-row warm-up a 2-round median mixed a cold and a warm round):

* **plain**: ``df.write.jdbc`` append into an unconstrained, logged table with the DataFrame's own
  columns (what a Spark job that does not care about re-runs would do);
* **shardq**: :func:`shardq.spark.enqueue_dataframe`, end to end (default writer: ids, the
  shuffle by chunk, each chunk COPY'd into ``shardq_tasks`` by Spark's write tasks with its ledger
  row; ``--writer jdbc``: ids, staging write, index, chunked merge, staging drop).

* **floor**: no Spark and no re-run safety at all: the same number of rows, already rendered as
  CSV in memory, ``COPY``'d by psycopg straight into ``shardq_tasks`` over two connections (one
  per core), as sorted by id as the merge inserts them. What any enqueue path on this machine
  pays for the tasks table's heap and its two B-trees (primary key, id); it bounds the ratio a
  Spark path can reach.

``--row-key`` adds a unique ``n`` column to the input (written to the plain table too) and maps it
as :attr:`shardq.spark.TaskColumns.row_key`, so ids need no shuffle.

The goal (issue 20) is shardq >= 0.7 x the floor, in the same run (``shardq_over_floor``; the
ratio to the plain append is reported too). ``--writer jdbc`` measures the staging path instead
of the default COPY writer. Without ``--dsn`` a scratch database is created in the embedded
PostgreSQL and dropped at the end. Figures are ratios for this machine, not capacity:
PostgreSQL, Spark and this script share its cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from shardq.migrations import apply as migrate
from shardq.sessions.dsn import Dsn
from shardq.sessions.session import Session
from shardq.spark import TaskColumns, WriteOptions, enqueue_dataframe, jdbc_target, spark_session
from shardq.spark.jdbc import DRIVER_CLASS

PLAIN_TABLE = "shardq_lt_plain"


def scratch_database() -> tuple[Dsn, Callable[[], None]]:
    from shardq.sessions.embedded import EmbeddedServer

    server = EmbeddedServer()
    server.start()
    name = f"shardq_lt_{uuid.uuid4().hex[:8]}"
    with Session(Dsn.parse(server.url("postgres"))) as admin:
        admin.execute_raw(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with Session(Dsn.parse(server.url("postgres"))) as admin:
            admin.execute_raw(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return Dsn.parse(server.url(name)), drop


def plain_write(df, dsn: Dsn, options: WriteOptions) -> float:
    target = jdbc_target(dsn)
    with Session(dsn) as session:
        session.execute_raw(f"DROP TABLE IF EXISTS {PLAIN_TABLE}")
        extra = ", n BIGINT" if "n" in df.columns else ""
        session.execute_raw(f"CREATE TABLE {PLAIN_TABLE} (payload BYTEA{extra})")
    started = time.perf_counter()
    writer = (
        df.coalesce(options.partitions)
        .write.format("jdbc")
        .option("url", target.url)
        .option("driver", DRIVER_CLASS)
        .option("dbtable", PLAIN_TABLE)
        .option("batchsize", str(options.batch_size))
        .option("isolationLevel", "NONE")
        .option("numPartitions", str(options.partitions))
        .mode("append")
    )
    if target.user:
        writer = writer.option("user", target.user)
    writer.save()
    return time.perf_counter() - started


def shardq_write(df, dsn: Dsn, options: WriteOptions) -> tuple[float, dict]:
    columns = TaskColumns(payload="payload", row_key="n" if "n" in df.columns else None)
    with Session(dsn) as session:
        session.execute_raw("TRUNCATE shardq_tasks")
        session.execute_raw("CHECKPOINT")
    started = time.perf_counter()
    result = enqueue_dataframe(
        df, "loadtest", run_id=f"lt-{uuid.uuid4().hex}", dsn=dsn, columns=columns, options=options
    )
    return time.perf_counter() - started, result.as_json()


def copy_floor(rows: int, dsn: Dsn, connections: int = 2) -> float:
    """Seconds to COPY ``rows`` ready tasks (64-byte payloads) straight into shardq_tasks."""
    import hashlib
    import threading

    import psycopg

    ids = sorted(uuid.UUID(bytes=hashlib.md5(b"floor%d" % i).digest()) for i in range(rows))
    # exec_time: one value for all, as a merge transaction's now() gives a whole chunk.
    due = time.strftime("%Y-%m-%d %H:%M:%S+00", time.gmtime())
    lines = [f"ready,loadtest,0,{due},{i},\\x{hashlib.sha256(b'%d' % n).hexdigest() * 2}\n" for n, i in enumerate(ids)]
    parts = [("".join(lines[k::connections])).encode() for k in range(connections)]
    del lines
    with Session(dsn) as session:
        session.execute_raw("TRUNCATE shardq_tasks")
        session.execute_raw("CHECKPOINT")

    def load(data: bytes) -> None:
        with psycopg.connect(dsn.conninfo) as conn, conn.cursor() as cur:
            with cur.copy(
                "COPY shardq_tasks (state, queue, rank, exec_time, id, payload) FROM STDIN (FORMAT csv)"
            ) as copy:
                for start in range(0, len(data), 1 << 20):
                    copy.write(data[start : start + (1 << 20)])

    threads = [threading.Thread(target=load, args=(part,)) for part in parts]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def measure(
    rows: int,
    rounds: int,
    dsn: Dsn,
    options: WriteOptions,
    spark,
    *,
    row_key: bool = False,
    compare_staging: bool = False,
) -> dict:
    from pyspark.sql import functions as F

    migrate.upgrade(dsn)
    df = (
        spark.range(rows)
        .select(
            F.unhex(F.sha2(F.col("id").cast("string"), 256)).alias("payload"),
            F.col("id").alias("n"),  # 32 bytes
        )
        .select(F.concat("payload", "payload").alias("payload"), "n")
    )  # 64 bytes
    df = (df if row_key else df.select("payload")).cache()
    df.count()
    warm = df.limit(max(20_000, rows // 10))
    plain_write(warm, dsn, options)
    shardq_write(warm, dsn, options)
    staging_options = dataclasses.replace(options, writer="jdbc")
    if compare_staging:
        shardq_write(warm, dsn, staging_options)
    plain, ours, details, staging = [], [], [], []
    for _ in range(rounds):
        with Session(dsn) as session:
            session.execute_raw("CHECKPOINT")
        plain.append(plain_write(df, dsn, options))
        seconds, result = shardq_write(df, dsn, options)
        ours.append(seconds)
        details.append(result)
        assert result["enqueued"] == rows, result
        if compare_staging:
            seconds, result = shardq_write(df, dsn, staging_options)
            staging.append(seconds)
            assert result["enqueued"] == rows, result
    floor = [copy_floor(rows, dsn) for _ in range(rounds)]
    plain_rate = rows / statistics.median(plain)
    ours_rate = rows / statistics.median(ours)
    return {
        "rows": rows,
        "rounds": rounds,
        "row_key": row_key,
        "partitions": options.partitions,
        "batch_size": options.batch_size,
        "chunks": options.chunks,
        "merge_workers": options.merge_workers,
        "plain_seconds": plain,
        "shardq_seconds": ours,
        "plain_rows_per_s": round(plain_rate),
        "shardq_rows_per_s": round(ours_rate),
        "ratio": round(ours_rate / plain_rate, 3),
        "shardq_runs": details,
        "floor_seconds": floor,
        "floor_rows_per_s": round(rows / statistics.median(floor)),
        "floor_ratio": round(rows / statistics.median(floor) / plain_rate, 3),
        "shardq_over_floor": round(ours_rate / (rows / statistics.median(floor)), 3),
        **(
            {
                "staging_seconds": staging,
                "staging_rows_per_s": round(rows / statistics.median(staging)),
                "staging_over_floor": round(rows / statistics.median(staging) / (rows / statistics.median(floor)), 3),
            }
            if staging
            else {}
        ),
        "writer": "COPY writer" if options.writer != "jdbc" else "staging + chunked merge",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=WriteOptions.partitions)
    parser.add_argument("--batch-size", type=int, default=WriteOptions.batch_size)
    parser.add_argument("--chunks", type=int, default=None)
    parser.add_argument("--merge-workers", type=int, default=WriteOptions.merge_workers)
    parser.add_argument("--writer", choices=("auto", "copy", "jdbc"), default="auto")
    parser.add_argument(
        "--compare-staging",
        action="store_true",
        help="Also run the staging path (writer jdbc) in each round, after the default writer",
    )
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--row-key",
        action="store_true",
        help="Give each row a key column (ids from it, no shuffle); the plain table gets it too",
    )
    parser.add_argument("--dsn", default=None, help="A database to use (default: a scratch one in the embedded server)")
    parser.add_argument("--out", type=Path, default=None, help="Write the figures as JSON here")
    args = parser.parse_args(argv)
    options = WriteOptions(
        partitions=args.partitions,
        batch_size=args.batch_size,
        chunks=args.chunks,
        merge_workers=args.merge_workers,
        writer=args.writer,
    )
    drop = None
    if args.dsn:
        dsn = Dsn.parse(args.dsn)
    else:
        dsn, drop = scratch_database()
    spark = spark_session(master=args.master, conf={"spark.driver.memory": "2g"})
    try:
        figures = measure(
            args.rows, args.rounds, dsn, options, spark, row_key=args.row_key, compare_staging=args.compare_staging
        )
    finally:
        spark.stop()
        if drop:
            drop()
    print(f"plain append : {figures['plain_rows_per_s']:>9,} rows/s  {figures['plain_seconds']}")
    print(f"shardq       : {figures['shardq_rows_per_s']:>9,} rows/s  {figures['shardq_seconds']}")
    print(f"ratio        : {figures['ratio']:.3f} x plain")
    print(
        f"floor (COPY straight into shardq_tasks, no Spark): {figures['floor_rows_per_s']:,} rows/s"
        f" = {figures['floor_ratio']:.3f} x plain"
    )
    print(f"shardq / floor: {figures['shardq_over_floor']:.3f}  (goal >= 0.7)")
    if "staging_seconds" in figures:
        print(
            f"staging path : {figures['staging_rows_per_s']:>9,} rows/s  {figures['staging_seconds']}"
            f" = {figures['staging_over_floor']:.3f} x floor"
        )
    for run in figures["shardq_runs"]:
        print(f"  write {run['write_seconds']:.2f}s  merge {run['merge_seconds']:.2f}s  staged {run['staged_rows']}")
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
