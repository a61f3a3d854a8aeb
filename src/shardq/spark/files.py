"""File inputs of a Spark bulk enqueue (the CLI's ``shardq spark-enqueue``): the format, a run id
derived from the files, reading them, and the whole job over a path."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from shardq import validation
from shardq.errors import InvalidInput
from shardq.sessions.dsn import Dsn
from shardq.spark.columns import TaskColumns
from shardq.spark.job import enqueue_dataframe
from shardq.spark.options import FORMATS, Progress, SparkEnqueueResult, WriteOptions

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def input_format(path: str | os.PathLike, fmt: str | None) -> str:
    """``fmt``, or the format named by the path's extension (``.parquet``, ``.csv``, ``.json``/
    ``.jsonl``), or parquet (Spark's own directories of part files)."""
    if fmt:
        if fmt not in FORMATS:
            raise InvalidInput(f"format must be one of {', '.join(FORMATS)}")
        return fmt
    suffix = Path(path).suffix.lower().lstrip(".")
    return (
        {"jsonl": "json", "ndjson": "json"}.get(suffix, suffix)
        if suffix in FORMATS + ("jsonl", "ndjson")
        else "parquet"
    )


def _input_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    # Spark ignores files starting with _ or . (markers such as _SUCCESS, checksums).
    return sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith(("_", ".")))


def derive_run_id(queue: str, path: str | os.PathLike, fmt: str, columns: TaskColumns, *, call: str = "") -> str:
    """A run id for a file input: sha256 over the queue, the format, the column mapping, the
    input's absolute path and, for each of its files, the relative name, size and modification
    time (not the content: hashing the data would cost a full extra read), and ``call`` (the
    task and arguments column of task-API rows, if any). Re-running over the
    unchanged input gives the same id, so it is a re-run; touching or rewriting a file makes it a
    new run."""
    root = Path(path).expanduser().resolve()
    if not root.exists():
        raise InvalidInput(f"input {str(root)!r} does not exist")
    digest = hashlib.sha256()
    for part in (queue, fmt, repr(sorted(columns.mapped().items())), str(root)) + ((call,) if call else ()):
        digest.update(part.encode("utf-8") + b"\x00")
    for file in _input_files(root):
        stat = file.stat()
        digest.update(
            f"{file.relative_to(root) if file != root else file.name}|{stat.st_size}|{stat.st_mtime_ns}\x00".encode()
        )
    return f"input-{digest.hexdigest()[:32]}"


def read_input(spark: SparkSession, path: str | os.PathLike[str], fmt: str) -> DataFrame:
    """Read a parquet, CSV (with a header row; types inferred) or JSON-lines input."""
    root = Path(path).expanduser()
    if not root.exists():
        raise InvalidInput(f"input {str(root)!r} does not exist")
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.option("header", "true").option("inferSchema", "true")
    return reader.load(str(root.resolve()))


def enqueue_file(
    queue: str,
    path: str | os.PathLike,
    *,
    fmt: str | None = None,
    columns: TaskColumns | None = None,
    options: WriteOptions | None = None,
    run_id: str | None = None,
    dsn: str | Dsn | None = None,
    master: str = "local[2]",
    jdbc_jar: str | None = None,
    progress: Progress | None = None,
    task: str | None = None,
    args_col: str = "args",
    then: str | None = None,
) -> SparkEnqueueResult:
    """Start a local SparkSession, read ``path`` and :func:`enqueue_dataframe` it (the CLI's
    ``shardq spark-enqueue``). Without ``run_id`` the id is :func:`derive_run_id`'s, so running
    the same command over the same, unchanged input again is a re-run (``then``, the callback's
    task name, is not part of it: the first attempt that names one pins it)."""
    from shardq.spark.jdbc import find_jdbc_driver, spark_session

    validation.queue_name(queue)
    columns = columns or TaskColumns()
    options = (options or WriteOptions()).validate()
    fmt = input_format(path, fmt)
    run_id = run_id or derive_run_id(queue, path, fmt, columns, call=f"{task}\x00{args_col}" if task else "")
    report = progress or (lambda phase, done, total: None)
    report("start", 0, 1)
    spark = spark_session(master=master, driver=find_jdbc_driver(jdbc_jar), app_name=f"shardq-enqueue-{queue}")
    report("start", 1, 1)
    df = read_input(spark, path, fmt)
    return enqueue_dataframe(
        df,
        queue,
        run_id=run_id,
        dsn=dsn,
        columns=columns,
        options=options,
        progress=progress,
        task=task,
        args_col=args_col,
        then=then,
    )
