"""One Spark bulk enqueue: register the run, stage, write through JDBC, merge, clean up."""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .. import validation
from ..config import resolve_dsn
from ..db import Dsn, Session
from ..errors import InvalidInput, InvalidTaskFrame, QueuePaused, SparkSetupError
from ..store import TaskStore
from . import calls, writer
from . import frame as frame_module
from .frame import TaskColumns
from .jdbc import DRIVER_CLASS, check_driver_loadable, jdbc_target
from .ledger import SCHEME_BY_KEY, MergeOutcome, Run, SparkLedger, merge_chunks, stage_name

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ..app import AppTask
    from .jdbc import JdbcTarget

log = logging.getLogger("shardq.spark")

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

    @property
    def seconds(self) -> float:
        return self.write_seconds + self.merge_seconds

    def as_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__} | {"seconds": self.seconds}


Progress = Callable[[str, int, int], None]
"""``progress(phase, done, total)``: phase ``"write"`` (0/1 then 1/1) and ``"merge"`` (chunks)."""


def _run_id(run_id: str) -> str:
    if not isinstance(run_id, str) or not run_id.strip():
        raise InvalidInput("run id must be a non-empty string")
    if len(run_id) > RUN_ID_MAX:
        raise InvalidInput(f"run id longer than {RUN_ID_MAX} characters")
    return run_id


def enqueue_dataframe(
    df: DataFrame,
    queue: str,
    *,
    run_id: str,
    dsn: str | Dsn | None = None,
    columns: TaskColumns | None = None,
    options: WriteOptions | None = None,
    progress: Progress | None = None,
    on_chunk: Callable[[int, int | None], None] | None = None,
    task: str | AppTask | None = None,
    args_col: str = "args",
) -> SparkEnqueueResult:
    """Enqueue every row of ``df`` into ``queue`` as a task, exactly once per ``run_id``.

    With ``task`` (an ``@app.task`` function or a task name), each row is a call of that task
    with the arguments in column ``args_col`` (a struct, a string-keyed map, or a JSON object as
    a string): the payload is the one ``defer()`` writes (:mod:`shardq.spark.calls`), so
    ``shardq work --app`` runs the rows; an ``@app.task``'s priority and max_attempts apply
    unless columns map them, and a struct's fields are checked against its signature.

    ``run_id`` names the logical job and must be the same on every re-run of it (e.g. the
    scheduler's run key); the input must be the same rows again (``cache()`` or ``checkpoint()``
    a non-deterministic source). The first attempt pins the queue and the chunk count; an attempt
    with the same ``run_id`` and another queue is refused. A run whose chunks are all merged does
    no Spark work at all.

    ``columns`` defaults to ``TaskColumns()`` (a ``payload`` column only), ``options`` to
    ``WriteOptions()``. ``progress(phase, done, total)`` reports the ``"write"`` and ``"merge"``
    phases; ``on_chunk(chunk, tasks or None)`` is called after each chunk commits (a test hook,
    and a finer progress signal). Raises :class:`InvalidTaskFrame` for a DataFrame that does not fit
    ``columns``, :class:`SparkSetupError` when the JDBC driver is not on the session's classpath,
    :class:`shardq.errors.QueuePaused` when the queue is paused for enqueue,
    :class:`shardq.errors.DatabaseError` subclasses for database failures; after any failure,
    running the same call again is safe.
    """
    validation.queue_name(queue)
    run_id = _run_id(run_id)
    columns = columns or TaskColumns()
    options = (options or WriteOptions()).validate()
    limit = validation.PAYLOAD_MAX_BYTES
    labels: dict[str, str] = {}
    checks: list = []
    if task is not None:
        df, columns, labels, checks = calls.with_call_payload(df, task, args_col, columns, payload_limit=limit)
    frame_module.check_columns(df.schema, columns)  # fail before touching the database
    # Value checks run inside the write; after a failed one these count the bad rows.
    checks = checks + frame_module.value_checks(df, columns, labels=labels, payload_limit=limit,
                                                skip=("payload",) if task is not None else ())
    check_driver_loadable(df.sparkSession)
    dsn = resolve_dsn(dsn)
    target = jdbc_target(dsn)
    report = progress or (lambda phase, done, total: None)

    def new_session() -> Session:
        return Session(dsn, application_name="shardq-spark")

    with new_session() as session:
        ledger = SparkLedger(session)
        collect_stale_stages(ledger, options.stage_ttl_seconds)
        chunks = options.chunks or session.engine.spark_chunks_default
        run = ledger.run_register(run_id, queue, chunks)
        if run.queue != queue:
            raise InvalidInput(f"run id {run_id!r} belongs to queue {run.queue!r}, not {queue!r}")
        settings = TaskStore(session).queue_get(queue)
        if settings is not None and settings.paused_enqueue:
            raise QueuePaused(f"queue {queue!r} is paused for enqueue")
        done_before = ledger.chunks_merged(run_id)
        todo = [c for c in range(run.chunks) if c not in done_before]
        staged = 0
        write_seconds = merge_seconds = 0.0
        outcome = MergeOutcome(0, len(done_before), 0)
        if todo and _copy_writer(options, session, run):
            started = time.perf_counter()
            report("write", 0, 1)
            rows = frame_module.stage_frame(
                df, queue=queue, run_id=run_id, chunks=run.chunks, columns=columns,
                skip_chunks=frozenset(done_before), labels=labels, payload_limit=limit,
                chunking=run.chunking, cluster=options.partitions,
            )
            copy_rows, plain = writer.copy_frame(rows, set(columns.mapped()))
            spec = writer.WriterSpec(dsn, run_id, queue, run.chunks, plain=plain,
                                     keyed=columns.exclusive_key is not None,
                                     max_attempts_mapped=columns.max_attempts is not None,
                                     numbered=columns.row_key is None)
            try:
                writer.run_writer(copy_rows, spec)
            except Exception as exc:
                check = frame_module.is_check_failure(exc)
                if check:
                    # The checks fail in the shuffle's map stage: no chunk was written.
                    raise InvalidTaskFrame(frame_module.count_bad_rows(df, checks) or check) from None
                failure = writer.writer_failure(exc)
                if failure is not None:
                    raise failure from None
                raise
            write_seconds = time.perf_counter() - started
            report("write", 1, 1)
            # The executors committed the chunks; the ledger says which and how many tasks.
            new = {c: n for c, n in sorted(ledger.chunks_done(run_id).items()) if c not in done_before}
            outcome = MergeOutcome(len(new), len(done_before), sum(new.values()))
            staged = outcome.tasks
            counter = TaskStore(session)
            counter.count_enqueued(queue, outcome.tasks)
            counter.flush_enqueue_counts()
            merged = len(done_before)
            for chunk, tasks in new.items():
                merged += 1
                report("merge", merged, run.chunks)
                if on_chunk is not None:
                    on_chunk(chunk, tasks)
        elif todo:
            stage = ledger.stage_create(stage_name(run_id), run_id)
            try:
                started = time.perf_counter()
                report("write", 0, 1)
                rows = frame_module.stage_frame(
                    df, queue=queue, run_id=run_id, chunks=run.chunks, columns=columns,
                    skip_chunks=frozenset(done_before), labels=labels, payload_limit=limit,
                    chunking=run.chunking,
                )
                try:
                    _write(rows, stage.name, target, options)
                except InvalidTaskFrame as exc:
                    # Nothing of this attempt is merged; name every failed check with its rows.
                    raise InvalidTaskFrame(frame_module.count_bad_rows(df, checks) or str(exc)) from None
                ledger.stage_ready_for_merge(stage.name)
                write_seconds = time.perf_counter() - started
                report("write", 1, 1)
                started = time.perf_counter()
                merged = len(done_before)
                report("merge", merged, run.chunks)
                merged_so_far = [merged]

                def chunk_done(chunk: int, tasks: int | None) -> None:
                    merged_so_far[0] += 1  # called under merge_chunks' lock
                    report("merge", merged_so_far[0], run.chunks)
                    if on_chunk is not None:
                        on_chunk(chunk, tasks)

                outcome = merge_chunks(run, stage, todo, new_session, workers=options.merge_workers,
                                       keyed=columns.exclusive_key is not None,
                                       on_chunk=chunk_done)
                outcome = MergeOutcome(outcome.merged_chunks, outcome.skipped_chunks + len(done_before),
                                       outcome.tasks)
                merge_seconds = time.perf_counter() - started
                staged = ledger.stage_rows(stage.name)
            finally:
                _drop_quietly(ledger, stage.name)
        _, run_tasks = ledger.run_progress(run_id)
    return SparkEnqueueResult(
        run_id=run_id, queue=queue, chunks=run.chunks, merged_chunks=outcome.merged_chunks,
        skipped_chunks=outcome.skipped_chunks, enqueued=outcome.tasks, run_tasks=run_tasks,
        staged_rows=staged, write_seconds=write_seconds, merge_seconds=merge_seconds,
    )


def _copy_writer(options: WriteOptions, session: Session, run: Run) -> bool:
    """Whether this attempt writes through the COPY writer (:mod:`shardq.spark.writer`) rather
    than staging and merging."""
    if options.writer == "jdbc" or not session.engine.spark_copy_writer or run.scheme != SCHEME_BY_KEY:
        return False
    if writer.available():
        return True
    if options.writer == "copy":
        raise SparkSetupError("the COPY writer needs pyarrow: pip install 'shardq[spark]'")
    log.info("pyarrow is not installed: staging and merging instead of the COPY writer")
    return False


def _write(rows: DataFrame, stage: str, target: JdbcTarget, options: WriteOptions) -> None:
    """Append ``rows`` to the existing staging table (Spark issues no DDL in append mode)."""
    # At most `partitions` write tasks (each one JDBC connection), without another shuffle: a
    # repartition (or a sort by chunk, which would keep each chunk's rows on fewer pages of
    # staging) cost more in Spark than it saved in the merge.
    rows = rows.coalesce(options.partitions)
    writer = (
        rows.write.format("jdbc")
        .option("url", target.url)
        .option("driver", DRIVER_CLASS)  # needed when the jar comes through spark.jars
        .option("dbtable", stage)
        .option("batchsize", str(options.batch_size))
        # Autocommit: no long transaction per partition (CockroachDB's advice for bulk inserts).
        # A failed or duplicated task attempt leaves at worst duplicate rows, which the merge drops.
        .option("isolationLevel", "NONE")
        .option("numPartitions", str(options.partitions))
        .mode("append")
    )
    if target.user:
        writer = writer.option("user", target.user)
    if target.password:
        writer = writer.option("password", target.password)
    try:
        writer.save()
    except Exception as exc:
        check = frame_module.is_check_failure(exc)
        if check:
            raise InvalidTaskFrame(check) from None
        text = str(exc)
        if "No suitable driver" in text or f"ClassNotFoundException: {DRIVER_CLASS}" in text:
            raise SparkSetupError(f"{DRIVER_CLASS} is not available to Spark's executors") from None
        raise


def _drop_quietly(ledger: SparkLedger, stage: str) -> None:
    try:
        ledger.stage_drop(stage)
    except Exception as exc:  # noqa: BLE001 - the failure that got us here matters more; gc drops it later
        log.warning("could not drop staging table %s (shardq spark-gc will): %s", stage, exc)


def collect_stale_stages(ledger: SparkLedger, max_age_seconds: float) -> int:
    """Drop staging tables older than ``max_age_seconds`` (attempts that crashed or were killed)."""
    dropped = 0
    for stage in ledger.stages_stale(max_age_seconds):
        ledger.stage_drop(stage)
        dropped += 1
    if dropped:
        log.info("dropped %d stale staging table(s)", dropped)
    return dropped


@dataclass(frozen=True)
class GcResult:
    stages_dropped: int
    runs_forgotten: int


def gc(
    dsn: str | Dsn | None = None,
    *,
    stage_max_age_seconds: float = STAGE_TTL_SECONDS_DEFAULT,
    ledger_max_age_seconds: float | None = None,
) -> GcResult:
    """Drop staging tables older than ``stage_max_age_seconds``; with ``ledger_max_age_seconds``,
    also forget runs older than that (a forgotten run, run again, enqueues its tasks again: keep
    ledger rows as long as re-runs are possible; 30 days is a sensible floor)."""
    if stage_max_age_seconds < 0 or (ledger_max_age_seconds is not None and ledger_max_age_seconds < 0):
        raise InvalidInput("ages must be >= 0 seconds")
    with Session(resolve_dsn(dsn), application_name="shardq-spark-gc") as session:
        ledger = SparkLedger(session)
        stages = collect_stale_stages(ledger, stage_max_age_seconds)
        runs = 0
        if ledger_max_age_seconds is not None:
            while True:
                forgotten = ledger.runs_expire(ledger_max_age_seconds)
                runs += forgotten
                if forgotten < 1000:
                    break
    return GcResult(stages, runs)


def run_progress(run_id: str, dsn: str | Dsn | None = None) -> tuple[int, int]:
    """(chunks merged, tasks enqueued) of a run so far, over all its attempts."""
    with Session(resolve_dsn(dsn), application_name="shardq-spark") as session:
        return SparkLedger(session).run_progress(_run_id(run_id))


# -- file inputs (the CLI) ------------------------------------------------------------------
def input_format(path: str | os.PathLike, fmt: str | None) -> str:
    """``fmt``, or the format named by the path's extension (``.parquet``, ``.csv``, ``.json``/
    ``.jsonl``), or parquet (Spark's own directories of part files)."""
    if fmt:
        if fmt not in FORMATS:
            raise InvalidInput(f"format must be one of {', '.join(FORMATS)}")
        return fmt
    suffix = Path(path).suffix.lower().lstrip(".")
    return {"jsonl": "json", "ndjson": "json"}.get(suffix, suffix) if suffix in FORMATS + ("jsonl", "ndjson") else "parquet"


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
        digest.update(f"{file.relative_to(root) if file != root else file.name}|{stat.st_size}|{stat.st_mtime_ns}\x00".encode())
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
) -> SparkEnqueueResult:
    """Start a local SparkSession, read ``path`` and :func:`enqueue_dataframe` it (the CLI's
    ``shardq spark-enqueue``). Without ``run_id`` the id is :func:`derive_run_id`'s, so running
    the same command over the same, unchanged input again is a re-run."""
    from .jdbc import find_jdbc_driver, spark_session

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
    return enqueue_dataframe(df, queue, run_id=run_id, dsn=dsn, columns=columns, options=options, progress=progress,
                             task=task, args_col=args_col)
