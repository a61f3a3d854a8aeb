"""One Spark bulk enqueue: register the run, stage, write through JDBC, merge, clean up.

The job's options and result are in :mod:`.options` and cleaning up after it in :mod:`.cleanup`
(their names are importable from here too); file inputs, which run this job, in :mod:`.files`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from shardq import validation
from shardq.arguments import encode_call
from shardq.errors import InvalidInput, InvalidTaskFrame, QueuePaused, SparkSetupError
from shardq.models.workflow_graph import STEP_NAME_MAX, StepCall
from shardq.sessions.dsn import Dsn, resolve_dsn
from shardq.sessions.session import Session
from shardq.sessions.store import TaskStore
from shardq.spark import calls, writer
from shardq.spark import frame as frame_module
from shardq.spark.cleanup import GcResult, collect_stale_stages, drop_quietly, gc, run_progress
from shardq.spark.columns import TaskColumns
from shardq.spark.jdbc import DRIVER_CLASS, check_driver_loadable, jdbc_target
from shardq.spark.ledger import SCHEME_BY_KEY, MergeOutcome, Run, SparkLedger, merge_chunks, stage_name
from shardq.spark.options import (
    FORMATS,
    LEDGER_TTL_SECONDS_DEFAULT,
    RUN_ID_MAX,
    STAGE_TTL_SECONDS_DEFAULT,
    WRITERS,
    Progress,
    SparkEnqueueResult,
    WriteOptions,
    check_run_id,
)
from shardq.workflows import spark_callbacks as run_callbacks
from shardq.workflows.spark_callbacks import Callback

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from shardq.app.application import AppTask
    from shardq.spark.jdbc import JdbcTarget

__all__ = [
    "FORMATS",
    "LEDGER_TTL_SECONDS_DEFAULT",
    "RUN_ID_MAX",
    "STAGE_TTL_SECONDS_DEFAULT",
    "WRITERS",
    "GcResult",
    "Progress",
    "SparkEnqueueResult",
    "WriteOptions",
    "collect_stale_stages",
    "enqueue_dataframe",
    "gc",
    "run_progress",
]

log = logging.getLogger("shardq.spark")


def enqueue_dataframe(  # noqa: C901 - the documented options, checked in one place
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
    then: str | AppTask | StepCall | None = None,
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
    and a finer progress signal).

    ``then`` (an ``@app.task`` function, its call ``task.step(**arguments)``, or a task name,
    called without arguments in ``queue``) is the run's callback: enqueued exactly once, when every
    task of the run has been acked, re-runs included; a dead task of the run cancels it
    (:mod:`shardq.workflows.spark_callbacks`; ``result.callback_workflow`` names the workflow that shows its
    state). The first attempt that gives it pins it: a re-run may leave it out, another callback
    is refused, and so is a callback added after chunks were merged without one, or a run that
    maps an exclusive key.

    Raises :class:`InvalidTaskFrame` for a DataFrame that does not fit
    ``columns``, :class:`SparkSetupError` when the JDBC driver is not on the session's classpath,
    :class:`shardq.errors.QueuePaused` when the queue is paused for enqueue,
    :class:`shardq.errors.DatabaseError` subclasses for database failures; after any failure,
    running the same call again is safe.
    """
    validation.queue_name(queue)
    run_id = check_run_id(run_id)
    columns = columns or TaskColumns()
    callback_call = _callback_call(then, queue, columns)
    options = (options or WriteOptions()).validate()
    limit = validation.PAYLOAD_MAX_BYTES
    labels: dict[str, str] = {}
    checks: list = []
    if task is not None:
        df, columns, labels, checks = calls.with_call_payload(df, task, args_col, columns, payload_limit=limit)
    frame_module.check_columns(df.schema, columns)  # fail before touching the database
    # Value checks run inside the write; after a failed one these count the bad rows.
    checks = checks + frame_module.value_checks(
        df, columns, labels=labels, payload_limit=limit, skip=("payload",) if task is not None else ()
    )
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
        callback = _callback(session, run_id, callback_call, done_before)
        if callback is not None:
            run = replace(run, workflow_id=callback.mark)  # what each of the run's tasks carries
        todo = [c for c in range(run.chunks) if c not in done_before]
        staged = 0
        write_seconds = merge_seconds = 0.0
        outcome = MergeOutcome(0, len(done_before), 0)
        used = ""
        if todo and _copy_writer(options, session, run):
            used = "copy"
            started = time.perf_counter()
            report("write", 0, 1)
            rows = frame_module.stage_frame(
                df,
                queue=queue,
                run_id=run_id,
                chunks=run.chunks,
                columns=columns,
                skip_chunks=frozenset(done_before),
                labels=labels,
                payload_limit=limit,
                chunking=run.chunking,
                cluster=options.partitions,
            )
            copy_rows, plain = writer.copy_frame(rows, set(columns.mapped()))
            spec = writer.WriterSpec(
                dsn,
                run_id,
                queue,
                run.chunks,
                plain=plain,
                keyed=columns.exclusive_key is not None,
                max_attempts_mapped=columns.max_attempts is not None,
                numbered=columns.row_key is None,
                workflow_id=run.workflow_id,
            )
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
            used = "jdbc"
            stage = ledger.stage_create(stage_name(run_id), run_id)
            try:
                started = time.perf_counter()
                report("write", 0, 1)
                rows = frame_module.stage_frame(
                    df,
                    queue=queue,
                    run_id=run_id,
                    chunks=run.chunks,
                    columns=columns,
                    skip_chunks=frozenset(done_before),
                    labels=labels,
                    payload_limit=limit,
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

                outcome = merge_chunks(
                    run,
                    stage,
                    todo,
                    new_session,
                    workers=options.merge_workers,
                    keyed=columns.exclusive_key is not None,
                    on_chunk=chunk_done,
                )
                outcome = MergeOutcome(outcome.merged_chunks, outcome.skipped_chunks + len(done_before), outcome.tasks)
                merge_seconds = time.perf_counter() - started
                staged = ledger.stage_rows(stage.name)
            finally:
                drop_quietly(ledger, stage.name)
        _, run_tasks = ledger.run_progress(run_id)
        released = False
        if callback is not None:
            # This attempt wrote every row (a failed write raised above; a chunk another attempt
            # was writing was waited for), though chunks without rows have no ledger row: the run
            # is complete. If its tasks were all acked already (or a re-run finds them so), the
            # callback is released here, once.
            released = session.run(run_callbacks.complete_plan(run_id))
    return SparkEnqueueResult(
        run_id=run_id,
        queue=queue,
        chunks=run.chunks,
        merged_chunks=outcome.merged_chunks,
        skipped_chunks=outcome.skipped_chunks,
        enqueued=outcome.tasks,
        run_tasks=run_tasks,
        staged_rows=staged,
        write_seconds=write_seconds,
        merge_seconds=merge_seconds,
        writer=used,
        callback_workflow=str(callback.workflow_id) if callback is not None else None,
        callback_released=released,
    )


def _callback_call(then: str | AppTask | StepCall | None, queue: str, columns: TaskColumns) -> StepCall | None:
    """``then`` as the call to enqueue (checked before anything is read or written)."""
    if then is None:
        return None
    if columns.exclusive_key is not None:
        raise InvalidInput("then= does not apply to a run that maps an exclusive key")
    if isinstance(then, StepCall):
        return then
    if isinstance(then, str):
        if not then.strip() or len(then) > STEP_NAME_MAX:
            raise InvalidInput(f"then= needs a task name of 1 to {STEP_NAME_MAX} characters")
        return StepCall(then, encode_call(then, {}), queue)
    step = getattr(then, "step", None)
    if step is None:
        raise InvalidInput(f"then= takes an app task, its step() or a task name, not {type(then).__name__}")
    call: StepCall = step()
    return call


def _callback(session: Session, run_id: str, call: StepCall | None, done_before: set[int]) -> Callback | None:
    """The run's callback: registered now by the first attempt that gives one, else as registered."""
    found = session.run(run_callbacks.get_plan(run_id))
    if call is None:
        return found
    if found is None:
        if done_before:
            raise InvalidInput(f"run {run_id!r} merged chunks without then=: its callback cannot be added now")
        found = session.run(run_callbacks.register_plan(run_id, call))
    if found.step != call.task:
        raise InvalidInput(f"run {run_id!r} has callback {found.step!r}, not {call.task!r}")
    return found


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
