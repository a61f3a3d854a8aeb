"""Resizing on CockroachDB: ``ALTER PRIMARY KEY … USING HASH WITH (bucket_count = N)``.

Reached through :func:`shardq.resize.resize_buckets`. The statement runs
alone in autocommit (CockroachDB runs a schema change atomically only alone); a second session
reports the schema-change job's progress; consumers follow by re-discovering the layout.
``ALTER PRIMARY KEY`` to the same columns with another bucket count keeps no copy of the old key,
but keeps the old shard column (``pkg/sql/logictest/testdata/logic_test/alter_primary_key``); it is
dropped afterwards so that a consumer still filtering on it fails and re-discovers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from shardq import validation
from shardq.errors import DatabaseError, DatabaseUnavailable, ResizeInProgress
from shardq.models.layout import SchemaJob
from shardq.resize.results import ResizeProgress, ResizeResult
from shardq.sessions.session import Session
from shardq.sql.plan import SchemaChange, single

if TYPE_CHECKING:
    from shardq.engine.cockroachdb import CockroachDBEngine

log = logging.getLogger("shardq.resize")

JOB_POLL_SECONDS_DEFAULT = 1.0
#: Lost connections in a row that a wait for the schema-change jobs survives (each poll reconnects).
RECONNECTS_MAX = 3

#: How the server refuses an ALTER PRIMARY KEY while another schema change of the table runs
#: (pkg/sql/alter_primary_key.go: ``unimplemented.NewWithIssuef(45510, "table %s is currently
#: undergoing a schema change")``; pkg/sql/schema_changer_test.go,
#: TestSchemaChangeWhileExecutingPrimaryKeyChange: "cannot perform a schema change operation while
#: a primary key change is in progress").
_BUSY = ("is currently undergoing a schema change", "while a primary key change is in progress")

ProgressHook = Callable[[ResizeProgress], None]


def _report(on_progress: ProgressHook | None, progress: ResizeProgress) -> None:
    if on_progress is not None:
        on_progress(progress)


def _job_progress(jobs: list[SchemaJob]) -> ResizeProgress:
    job = jobs[0]
    detail = f"job {job.job_id} {job.status}" + (f": {job.running_status}" if job.running_status else "")
    return ResizeProgress("schema-change", detail, fraction=job.fraction_completed)


class _JobWatcher:
    """Reports the schema-change job's progress from its own session while the ALTER statement
    blocks the resizing one (CockroachDB returns from an autocommit schema change only once its
    job has done the backfill)."""

    def __init__(
        self,
        engine: CockroachDBEngine,
        open_session: Callable[[], Session],
        poll: float,
        on_progress: ProgressHook | None,
    ) -> None:
        self._engine = engine
        self._open = open_session
        self._poll = poll
        self._on_progress = on_progress
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="shardq-resize-watch", daemon=True)

    def __enter__(self) -> _JobWatcher:
        if self._on_progress is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self._poll * 2 + 5)

    def _loop(self) -> None:
        try:
            with self._open() as session:
                while not self._stop.wait(self._poll):
                    jobs = session.run(self._engine.schema_jobs())
                    if jobs:
                        _report(self._on_progress, _job_progress(jobs))
        except Exception as exc:  # noqa: BLE001 - progress is a courtesy: never let it break the resize
            log.warning("could not watch the schema-change job: %s", exc)


def wait_for_schema_jobs(
    engine: CockroachDBEngine,
    session: Session,
    *,
    poll: float = JOB_POLL_SECONDS_DEFAULT,
    on_progress: ProgressHook | None = None,
) -> None:
    """Block until ``shardq_tasks`` has no unfinished schema-change job, reporting progress. A
    lost connection is reconnected (up to :data:`RECONNECTS_MAX` times in a row): the jobs run on
    the cluster whatever becomes of the session that waits for them."""
    pause = threading.Event()
    lost = 0
    while True:
        try:
            jobs = session.run(engine.schema_jobs())
        except DatabaseUnavailable as exc:
            lost += 1
            if lost > RECONNECTS_MAX:
                raise
            log.warning("lost the connection while waiting for the schema-change job (%s); reconnecting", exc)
            pause.wait(poll)
            continue
        lost = 0
        if not jobs:
            return
        _report(on_progress, _job_progress(jobs))
        pause.wait(poll)


def resize(
    engine: CockroachDBEngine,
    session: Session,
    buckets: int,
    *,
    open_session: Callable[[], Session],
    poll: float = JOB_POLL_SECONDS_DEFAULT,
    on_progress: ProgressHook | None = None,
) -> ResizeResult:
    """Change the bucket count of ``shardq_tasks`` to ``buckets`` online.

    Steps: validate 2..2048 (before any DDL); read the current layout (the same count is a no-op
    that says so: running the ALTER with identical settings errors on servers before
    cockroachdb#164557); refuse while another schema change of the table is unfinished
    (:class:`ResizeInProgress`); run ``ALTER PRIMARY KEY … USING HASH WITH (bucket_count = N)``
    alone in autocommit, with a second session (``open_session``) reporting the job's progress;
    wait for the table's remaining schema-change jobs (reconnecting if the connection is lost,
    during the ALTER too: the job outlives it); check the new layout; then try to drop the
    old shard column. CockroachDB keeps that column after the swap; a consumer still filtering on
    it would read the spans of every new bucket with the stale column as a residual filter (many
    more rows than one bucket, and SKIP LOCKED locking what it scans: docs/cockroachdb.md, "Layout discovery"); once it is gone such a claim fails with
    :class:`~shardq.errors.ShardLayoutChanged` and the consumer re-discovers. If the server
    refuses the drop, the refusal is reported in ``stale_column_kept`` and consumers still switch
    within their refresh interval.

    Does not: take the table offline, move rows by hand (the schema change rewrites the index),
    or wait for the old index's GC job (it waits for ``gc.ttlseconds`` and blocks nothing).
    """
    validation.bucket_count(buckets)
    before = session.run(engine.read_layout())
    running = session.run(engine.schema_jobs())
    if before.bucket_count == buckets:
        note = f" (schema change job {running[0].job_id} still {running[0].status})" if running else ""
        return ResizeResult(
            "cockroachdb",
            buckets,
            buckets,
            False,
            f"already {buckets} buckets: nothing to do{note}",
            shard_column_before=before.shard_column,
            shard_column_after=before.shard_column,
        )
    if running:
        raise ResizeInProgress(
            f"a schema change of shardq_tasks is still running (job {running[0].job_id}: "
            f"{running[0].description}); wait for it before resizing"
        )
    _report(on_progress, ResizeProgress("schema-change", f"ALTER PRIMARY KEY to {buckets} buckets"))
    lost: DatabaseUnavailable | None = None
    try:
        with _JobWatcher(engine, open_session, poll, on_progress):
            session.run(single(SchemaChange("table_primary_key_alter", literals={"bucket_count": buckets})))
    except DatabaseUnavailable as exc:
        # The connection went while the ALTER waited for its job, which goes on without it
        # ("If the statement is canceled, jobs will continue in the background": CockroachDB's
        # docs, Online Schema Changes). Wait for it on a new connection; the layout then says
        # whether the ALTER took (it may never have arrived).
        log.warning("lost the connection during ALTER PRIMARY KEY (%s); waiting for its job", exc)
        lost = exc
    except DatabaseError as exc:
        # A schema change that started after the check above: the server refuses the ALTER
        # (0A000) rather than queue it.
        if any(text in str(exc) for text in _BUSY):
            raise ResizeInProgress(
                f"a schema change of shardq_tasks is still running ({exc}); wait for it before resizing"
            ) from exc
        raise
    wait_for_schema_jobs(engine, session, poll=poll, on_progress=on_progress)
    after = session.run(engine.read_layout())
    if after.bucket_count != buckets:
        if lost is not None:
            raise lost
        raise DatabaseError(
            f"ALTER PRIMARY KEY finished but shardq_tasks has {after.bucket_count} buckets, not {buckets}"
        )
    dropped, kept = False, None
    if before.shard_column and before.shard_column != after.shard_column:
        _report(on_progress, ResizeProgress("dropping-column", f"dropping stale shard column {before.shard_column}"))
        try:
            session.run(single(SchemaChange("shard_column_drop", identifiers={"column": before.shard_column})))
            wait_for_schema_jobs(engine, session, poll=poll, on_progress=on_progress)
            dropped = True
        except DatabaseError as exc:
            kept = str(exc)
            log.info("stale shard column %s kept: %s", before.shard_column, exc)
    message = f"resized from {before.bucket_count} to {buckets} buckets; shard column {after.shard_column}"
    if dropped:
        message += f" (dropped the old shard column {before.shard_column})"
    elif kept:
        message += f" (the old shard column {before.shard_column} stays: {kept})"
    _report(on_progress, ResizeProgress("done", message, fraction=1.0))
    return ResizeResult(
        "cockroachdb",
        before.bucket_count,
        buckets,
        True,
        message,
        shard_column_before=before.shard_column,
        shard_column_after=after.shard_column,
        stale_column_dropped=dropped,
        stale_column_kept=kept,
    )
