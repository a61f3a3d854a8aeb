"""Structured Streaming into a shardq queue: every micro-batch enqueued exactly once.

>>> stream = spark.readStream.schema("payload string").json("/data/incoming")
>>> query = enqueue_stream(stream, "emails", checkpoint_location="/data/checkpoints/emails",
...                        trigger={"availableNow": True})
>>> await_stream(query)

How (``foreachBatch``)
    Each micro-batch is one run of :func:`shardq.spark.enqueue_dataframe` with the run id
    ``stream-<query id>-<batch id>``. The query id is kept in the checkpoint, so it is the same
    after every restart; Spark replays a batch that did not commit (a crash, a failed merge, a
    stopped query) with the same batch id and the same input (file offsets are in the checkpoint).
    The replay therefore finds the run's merged chunks in the ledger and enqueues only the rest:
    across restarts every row of the stream is enqueued once.

Guarantees
    As :func:`enqueue_dataframe`'s, per batch, for sources Spark can replay (files, Kafka): a
    batch replayed after a crash anywhere (before, during or after its merge) adds nothing that
    was enqueued before.

Does not
    * protect batches once their ledger rows were forgotten (``shardq spark-gc
      --forget-runs-after``): keep them longer than a restart from an old checkpoint may take;
    * survive a new checkpoint directory: that is a new query id, i.e. a new stream;
    * run under Spark Connect (there the batch function runs in another process, which cannot
      receive the query id from this one; not tried).

Each batch registers one run (``shardq_spark_runs``) and ``chunks`` chunk rows (default 4 for
streams, since micro-batches are small); ``shardq spark-gc --forget-runs-after DAYS`` removes old
ones.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shardq import validation
from shardq.errors import InvalidInput
from shardq.sessions.dsn import Dsn
from shardq.spark import calls
from shardq.spark import frame as frame_module
from shardq.spark.columns import TaskColumns
from shardq.spark.job import enqueue_dataframe
from shardq.spark.options import SparkEnqueueResult, WriteOptions

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from shardq.app.application import AppTask

#: chunks per micro-batch when the options do not say (a batch is small; each chunk is a transaction)
STREAM_CHUNKS_DEFAULT = 4
#: how long a batch waits for start() to hand over the query id (it returns within milliseconds)
QUERY_ID_WAIT_SECONDS = 120.0

BatchReport = Callable[[int, SparkEnqueueResult], None]
"""``on_batch(batch_id, result)``: called after each micro-batch's enqueue committed."""

# Errors raised inside foreachBatch, by query id: Spark wraps them in a StreamingQueryException,
# await_stream raises the original (an InvalidTaskFrame stays an InvalidTaskFrame).
_failures: dict[str, BaseException] = {}
_failures_lock = threading.Lock()


def stream_run_id(query_id: str, batch_id: int) -> str:
    """The ledger run id of one micro-batch."""
    return f"stream-{query_id}-{batch_id}"


def enqueue_stream(
    streaming_df: DataFrame,
    queue: str,
    *,
    checkpoint_location: str,
    dsn: str | Dsn | None = None,
    columns: TaskColumns | None = None,
    options: WriteOptions | None = None,
    task: str | AppTask | None = None,
    args_col: str = "args",
    trigger: dict[str, Any] | None = None,
    query_name: str | None = None,
    on_batch: BatchReport | None = None,
    on_chunk: Callable[[int, int | None], None] | None = None,
) -> StreamingQuery:
    """Start a streaming query that enqueues every micro-batch of ``streaming_df`` into
    ``queue`` exactly once, and return it (``query.stop()``, ``query.processAllAvailable()``,
    :func:`await_stream`).

    ``checkpoint_location`` is required: it holds the query id and the batches' offsets, and
    restarting from it resumes the stream without enqueuing anything twice. ``columns``,
    ``options``, ``task`` and ``args_col`` are :func:`enqueue_dataframe`'s (``options.chunks``
    defaults to 4 here). ``trigger`` is passed to ``DataStreamWriter.trigger`` (e.g.
    ``{"availableNow": True}``, ``{"processingTime": "10 seconds"}``; default: Spark's, as fast
    as batches come). ``on_batch(batch_id, result)`` reports each batch; ``on_chunk`` is
    :func:`enqueue_dataframe`'s test hook. The mapping is checked against the stream's schema
    before the query starts (:class:`shardq.errors.InvalidTaskFrame`)."""
    validation.queue_name(queue)
    if not isinstance(checkpoint_location, str) or not checkpoint_location.strip():
        raise InvalidInput("a checkpoint location is required for a stream (it keeps the stream's identity)")
    if not streaming_df.isStreaming:
        raise InvalidInput("enqueue_stream needs a streaming DataFrame (spark.readStream…); use enqueue_dataframe")
    columns = columns or TaskColumns()
    options = options or WriteOptions()
    if options.chunks is None:
        options = dataclasses.replace(options, chunks=STREAM_CHUNKS_DEFAULT)
    options.validate()
    # Check the mapping against the stream's schema now, not in the first batch.
    checked, mapping = streaming_df, columns
    if task is not None:
        checked, mapping, _, _ = calls.with_call_payload(streaming_df, task, args_col, columns)
    frame_module.check_columns(checked.schema, mapping)

    query_id: list[str] = []
    started = threading.Event()

    def enqueue_batch(batch_df: DataFrame, batch_id: int) -> None:
        if not started.wait(QUERY_ID_WAIT_SECONDS):
            raise RuntimeError("the streaming query did not report its id")
        try:
            result = enqueue_dataframe(
                batch_df,
                queue,
                run_id=stream_run_id(query_id[0], batch_id),
                dsn=dsn,
                columns=columns,
                options=options,
                task=task,
                args_col=args_col,
                on_chunk=on_chunk,
            )
        except BaseException as exc:
            with _failures_lock:
                _failures[query_id[0]] = exc
            raise
        if on_batch is not None:
            on_batch(batch_id, result)

    writer = streaming_df.writeStream.foreachBatch(enqueue_batch).option("checkpointLocation", checkpoint_location)
    if query_name:
        writer = writer.queryName(query_name)
    if trigger:
        writer = writer.trigger(**trigger)
    query = writer.start()
    query_id.append(str(query.id))
    with _failures_lock:
        _failures.pop(query_id[0], None)
    started.set()
    return query


def await_stream(query: StreamingQuery, timeout: float | None = None) -> bool:
    """Wait for ``query`` to end (``timeout`` whole seconds at most; returns whether it ended). If a
    batch failed, raises the error the batch raised (a bad row's :class:`InvalidTaskFrame`, a
    database error, a hook's exception) instead of Spark's wrapper."""
    try:
        ended = query.awaitTermination(int(timeout)) if timeout is not None else query.awaitTermination()
    except Exception:
        with _failures_lock:
            original = _failures.pop(str(query.id), None)
        if original is not None:
            raise original from None
        raise
    return True if ended is None else bool(ended)


def read_stream(spark: SparkSession, path: str, fmt: str, *, max_files_per_trigger: int | None = None) -> DataFrame:
    """A file-source stream over the directory ``path`` (parquet, CSV with a header row, JSON
    lines). Spark needs the schema up front: it is inferred from the files already there, so the
    directory must hold at least one; files added later must share it."""
    from shardq.spark.files import read_input

    root = Path(path).expanduser()
    if not root.is_dir():
        raise InvalidInput(f"a stream reads a directory; {str(root)!r} is not one")
    if not any(p.is_file() and not p.name.startswith(("_", ".")) for p in root.iterdir()):
        raise InvalidInput(f"{str(root)!r} has no files yet to take the stream's schema from")
    schema = read_input(spark, root, fmt).schema
    reader = spark.readStream.format(fmt).schema(schema)
    if fmt == "csv":
        reader = reader.option("header", "true")
    if max_files_per_trigger is not None:
        validation.positive_int(max_files_per_trigger, "max files per trigger", maximum=1_000_000)
        reader = reader.option("maxFilesPerTrigger", str(max_files_per_trigger))
    return reader.load(str(root.resolve()))


def stream_format(path: str | os.PathLike[str], fmt: str | None) -> str:
    """``fmt``, or the extension its files share (``.parquet``, ``.csv``, ``.json``/``.jsonl``),
    else parquet (Spark's own part files)."""
    from shardq.spark.files import input_format
    from shardq.spark.options import FORMATS

    if fmt:
        return input_format(path, fmt)
    suffixes = {
        input_format(p, None)
        for p in Path(path).expanduser().iterdir()
        if p.is_file()
        and not p.name.startswith(("_", "."))
        and p.suffix.lower().lstrip(".") in FORMATS + ("jsonl", "ndjson")
    }
    return suffixes.pop() if len(suffixes) == 1 else "parquet"


def enqueue_directory_stream(
    queue: str,
    path: str | os.PathLike[str],
    *,
    checkpoint: str | os.PathLike[str],
    fmt: str | None = None,
    columns: TaskColumns | None = None,
    options: WriteOptions | None = None,
    task: str | None = None,
    args_col: str = "args",
    follow: bool = False,
    max_files_per_trigger: int | None = None,
    dsn: str | Dsn | None = None,
    master: str = "local[2]",
    jdbc_jar: str | None = None,
    on_batch: BatchReport | None = None,
    on_start: Callable[[], None] | None = None,
) -> None:
    """``shardq spark-enqueue --stream``: enqueue the files of the directory ``path`` as a
    stream, checkpointed in ``checkpoint``. Without ``follow`` it takes the files there now
    (``availableNow``, ``max_files_per_trigger`` per micro-batch) and returns; with ``follow`` it
    keeps taking new files until interrupted (KeyboardInterrupt stops the query after its current
    batch's Spark work; a batch cut short is replayed on the next start). Running it again with
    the same checkpoint takes only files it has not taken yet."""
    from shardq.spark.jdbc import find_jdbc_driver, spark_session

    validation.queue_name(queue)
    if not str(checkpoint).strip():
        raise InvalidInput("--checkpoint needs a directory")
    root = Path(path).expanduser()
    if not root.is_dir():
        raise InvalidInput(f"a stream reads a directory; {str(root)!r} is not one")
    fmt = stream_format(root, fmt)
    (options or WriteOptions()).validate()
    spark = spark_session(master=master, driver=find_jdbc_driver(jdbc_jar), app_name=f"shardq-stream-{queue}")
    if on_start is not None:
        on_start()
    df = read_stream(spark, str(root), fmt, max_files_per_trigger=max_files_per_trigger)
    trigger = {"processingTime": "2 seconds"} if follow else {"availableNow": True}
    query = enqueue_stream(
        df,
        queue,
        checkpoint_location=str(Path(checkpoint).expanduser().resolve()),
        dsn=dsn,
        columns=columns,
        options=options,
        task=task,
        args_col=args_col,
        trigger=trigger,
        query_name=f"shardq-{queue}",
        on_batch=on_batch,
    )
    try:
        await_stream(query)
    except KeyboardInterrupt:
        query.stop()
        raise
