"""Bulk enqueue from Spark: write a DataFrame of tasks into a shardq queue through JDBC, safely
re-runnable (``pip install 'shardq[spark]'``; needs Java 17+ and the PostgreSQL JDBC driver).

>>> from shardq.spark import TaskColumns, enqueue_dataframe, spark_session
>>> spark = spark_session()                       # local[2], JDBC driver found for you
>>> df = spark.read.parquet("s3://…/emails/2026-11-23")
>>> enqueue_dataframe(df, "emails", run_id="emails-2026-11-23",
...                   columns=TaskColumns(payload="body", dedupe_key="message_id"))

Design (reference: ``shared/reference/spark-jdbc.md`` §0, verified on PostgreSQL)
    A job that fails half-way leaves the partitions it had committed behind, a retried or
    speculative Spark task writes its rows again, and the tasks table forgets a task once it is
    acked. So every task reaches ``shardq_tasks`` in a *chunk* transaction that also writes the
    chunk's ledger row, and a chunk with a ledger row is never written again:

    1. **Run.** The caller names the logical job with a ``run_id`` that stays the same on every
       re-run. ``shardq_spark_runs`` pins the run's queue, its number of chunks and (a ledger row
       with chunk -1) how rows are split into chunks, on the first attempt.
    2. **Deterministic ids** (:mod:`shardq.spark.frame`): each row's task id is a hash of the run,
       the queue and either its dedupe key or its content plus an occurrence number among
       identical rows, computed with Spark built-ins only; its chunk is the range of its
       first-occurrence id (first 32 bits scaled to ``chunks``), so all copies of a row share a
       chunk and a chunk covers one narrow stretch of the id index. The same input always gives the
       same (id, chunk, task) rows.
    3. **COPY writer** (PostgreSQL, the default; :mod:`shardq.spark.writer`): one shuffle puts each
       chunk's rows in one Spark partition (every value check runs in its map stage, before any
       write); each write task numbers identical rows, then per chunk opens a transaction, takes
       the chunk's ledger row (taken: skip), ``COPY``s the rows straight into ``shardq_tasks``
       (binary format; rows with a run_at, delay, dedupe key or exclusive key go through a
       ``TEMP`` table and the merge statements below), records the count and commits. Rows cross
       the network once and are written once.
    4. **Staging path** (CockroachDB, ``WriteOptions(writer="jdbc")``, runs registered before
       chunking schemes): each attempt creates its own staging table ``shardq_stage_<run>_<nonce>``
       (registered in ``shardq_spark_stages`` first) with no key or constraint, and Spark's JDBC
       writer appends to it (``reWriteBatchedInserts=true``, batches of ``k·128`` rows, a bounded
       number of partitions/connections, autocommit): duplicate rows from retried tasks are
       harmless there. Rows of chunks merged by an earlier attempt are not even written. Spark
       creates no table. After ``save()`` returned, the driver merges chunk by chunk,
       ``merge_workers`` at a time; each chunk is one transaction: take the chunk's ledger row
       (``ON CONFLICT DO NOTHING``; no row means merged already: skip), insert the chunk's rows
       into ``shardq_tasks`` with the same rules as ``task_insert_many`` (ready or scheduled by due
       time, rank from the priority, a live dedupe key skips the row, the database fills the
       bucket / shard, the queue is created on first use, a queue paused for enqueue rolls the
       chunk back; an id staged twice is inserted once; a row with an exclusive key becomes its
       key's active task or joins its backlog, as with ``enqueue_many``), record the count,
       commit. On CockroachDB a 40001 re-runs the whole chunk transaction
       (:meth:`shardq.sessions.session.Session.transaction`). The attempt drops its staging table whether it
       succeeded or failed; a killed attempt leaves it behind, and every job start (and
       ``shardq spark-gc``) drops staging tables older than a day.

Guarantees
    * Re-running a run over the same input enqueues every task exactly once in total, whatever
      happened before: a failed or killed write, a retried or speculative Spark task, a crash in
      the middle of the merge, consumers acking some of the run's tasks in between, two attempts
      running at once.
    * A row whose dedupe key is live in the queue is skipped, exactly as with ``enqueue_many``.
    * With ``then=``, the callback task is enqueued once per run, after every task of the run was
      acked, re-runs included; a dead task of the run cancels it (:mod:`shardq.workflows.spark_callbacks`).

Does not
    * make a non-deterministic input deterministic: ``cache()``/``checkpoint()`` it, or the re-run
      may see other rows (rows of chunks merged earlier are then simply not enqueued again);
    * protect a run after its ledger rows were forgotten (``shardq spark-gc --forget-runs-after``).

Modules: :mod:`.jdbc` (Java, driver jar, JDBC URL, SparkSession), :mod:`.columns` (column
mapping, each field's cast and checks), :mod:`.checks` (value checks and their report),
:mod:`.frame` (ids, chunks, the staging rows), :mod:`.calls` (rows as calls of app tasks),
:mod:`.ledger` (statements, merge), :mod:`.writer` (the COPY writer's executor side),
:mod:`.options` (the job's options and result), :mod:`.job` (the job), :mod:`.cleanup` (stale
staging tables, old runs, progress), :mod:`.files` (file inputs), :mod:`.stream` (Structured
Streaming, one run per micro-batch).
"""

from shardq.spark.cleanup import GcResult, gc, run_progress
from shardq.spark.columns import TaskColumns
from shardq.spark.files import derive_run_id, enqueue_file, input_format, read_input
from shardq.spark.jdbc import JdbcDriver, find_java, find_jdbc_driver, jdbc_target, spark_session
from shardq.spark.job import enqueue_dataframe
from shardq.spark.options import SparkEnqueueResult, WriteOptions
from shardq.spark.stream import await_stream, enqueue_directory_stream, enqueue_stream, read_stream, stream_run_id

__all__ = [
    "GcResult",
    "JdbcDriver",
    "SparkEnqueueResult",
    "TaskColumns",
    "WriteOptions",
    "await_stream",
    "derive_run_id",
    "enqueue_dataframe",
    "enqueue_directory_stream",
    "enqueue_file",
    "enqueue_stream",
    "find_java",
    "find_jdbc_driver",
    "gc",
    "input_format",
    "jdbc_target",
    "read_input",
    "read_stream",
    "run_progress",
    "spark_session",
    "stream_run_id",
]
