"""What a Spark bulk enqueue is told and what it reports: :class:`WriteOptions`,
:class:`SparkEnqueueResult`, the run id's rules."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from shardq import validation
from shardq.errors import InvalidInput

RUN_ID_MAX = 200
STAGE_TTL_SECONDS_DEFAULT = 24 * 3600.0
LEDGER_TTL_SECONDS_DEFAULT = 30 * 24 * 3600.0
FORMATS = ("parquet", "csv", "json")
WRITERS = ("auto", "copy", "jdbc")


@dataclass(frozen=True)
class WriteOptions:
    """How the job writes. Defaults suit a 2–8 core machine and one database.

    ``partitions`` (4): at most this many Spark write tasks, i.e. concurrent JDBC connections
    (the staging rows are coalesced, never shuffled again; with the content-derived ids they come
    out of the id shuffle with ``spark.sql.shuffle.partitions`` partitions, so this is the number). ``batch_size`` (1024): rows per JDBC batch, a multiple
    of 128 (pgjdbc rewrites a batch into INSERTs of at most 128 rows, and splits any remainder
    into smaller odd-sized statements). ``chunks`` (None: 64 on PostgreSQL, 256 on CockroachDB):
    how many merge transactions the run is split into; pinned by the first attempt of a run.
    ``merge_workers`` (2): chunks merged concurrently. ``stage_ttl_seconds`` (1 day): staging
    tables older than this, left by crashed attempts, are dropped when a job starts.

    ``writer`` ("auto"): "copy" — Spark's write tasks COPY each chunk into the tasks table
    themselves (:mod:`shardq.spark.writer`; PostgreSQL; pyarrow, pandas and shardq on the
    executors; ``partitions`` write tasks, each holding one chunk's rows in memory at a time, so
    give a large input enough ``chunks``: about one per million rows or more); "jdbc" — the
    staging table and the chunked merge (no Python on the executors); "auto" — "copy" where it can
    run (PostgreSQL, pyarrow importable, a run registered with chunking by first-occurrence id),
    else "jdbc". ``batch_size`` and ``merge_workers`` apply to "jdbc" only.
    """

    partitions: int = 4
    batch_size: int = 1024
    chunks: int | None = None
    merge_workers: int = 2
    stage_ttl_seconds: float = STAGE_TTL_SECONDS_DEFAULT
    writer: str = "auto"

    def validate(self) -> WriteOptions:
        if self.writer not in WRITERS:
            raise InvalidInput(f"writer must be one of {', '.join(WRITERS)}")
        validation.positive_int(self.partitions, "partitions", maximum=256)
        validation.positive_int(self.batch_size, "batch size", maximum=1_048_576)
        if self.batch_size % 128:
            raise InvalidInput("batch size must be a multiple of 128 (pgjdbc sends 128-row INSERTs)")
        if self.chunks is not None:
            validation.positive_int(self.chunks, "chunks", maximum=65_536)
        validation.positive_int(self.merge_workers, "merge workers", maximum=64)
        validation.positive_seconds(self.stage_ttl_seconds, "staging table TTL")
        return self


@dataclass(frozen=True)
class SparkEnqueueResult:
    """What one attempt did. ``enqueued`` counts tasks this attempt inserted; ``run_tasks`` counts
    them over every attempt of the run. ``skipped_chunks`` were merged by earlier attempts."""

    run_id: str
    queue: str
    chunks: int
    merged_chunks: int
    skipped_chunks: int
    enqueued: int
    run_tasks: int
    staged_rows: int
    write_seconds: float
    merge_seconds: float
    #: how the rows reached the tasks table: ``copy`` (the executors COPY each chunk in,
    #: :mod:`shardq.spark.writer`), ``jdbc`` (staged over JDBC, then merged), "" (nothing to write)
    writer: str = ""
    #: with ``then=``: the id of the run's callback workflow (``shardq workflow ID`` shows the
    #: callback's state), and whether this attempt's end released the callback (else the last ack
    #: of the run releases it, or did already)
    callback_workflow: str | None = None
    callback_released: bool = False

    @property
    def seconds(self) -> float:
        return self.write_seconds + self.merge_seconds

    def as_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__} | {"seconds": self.seconds}


Progress = Callable[[str, int, int], None]
"""``progress(phase, done, total)``: phase ``"write"`` (0/1 then 1/1) and ``"merge"`` (chunks)."""


def check_run_id(run_id: str) -> str:
    """``run_id``, checked: a non-empty string of at most ``RUN_ID_MAX`` characters."""
    if not isinstance(run_id, str) or not run_id.strip():
        raise InvalidInput("run id must be a non-empty string")
    if len(run_id) > RUN_ID_MAX:
        raise InvalidInput(f"run id longer than {RUN_ID_MAX} characters")
    return run_id
