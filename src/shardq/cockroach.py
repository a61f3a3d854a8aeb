"""Everything shardq knows that is specific to CockroachDB, kept in one place.

* The shard column of the hash-sharded primary key is discovered from the catalog, never built by
  hand or computed in Python: its name and hash expression depend on the CockroachDB version and
  on the table's history. ``ALTER PRIMARY KEY`` leaves the old shard column behind, and a filter
  on the stale column does not fail, it silently scans the whole table (``reference §1–2``), so
  discovery reads the first, implicit column of the *current* primary index.
* Resizing is ``ALTER PRIMARY KEY … USING HASH WITH (bucket_count = N)`` run alone in autocommit
  (:func:`resize`); consumers follow by re-discovering the layout (see :mod:`shardq.consumer`).
* SQLSTATE 40001 is retried by :mod:`shardq.db` around every statement and transaction; 40003 is
  re-sent only for lease-fenced statements (see :mod:`shardq.db` for why that is safe). Every
  CockroachDB connection asks for a 512 KiB result buffer so claims stay retryable by the server.
* No LISTEN/NOTIFY: consumers on CockroachDB always poll.

The statements are in ``sql/cockroachdb/``; ``docs/cockroachdb.md`` maps each to the documented
fact it relies on and lists how to check it on a cluster in minutes. None of this code has run
against a CockroachDB on the machines shardq is developed on (none can run there); the
``cockroach``-marked tests run it wherever one is reachable.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Callable

from . import validation
from .db import Session
from .errors import DatabaseError, NotMigrated, ResizeInProgress
from .models import ResizeProgress, ResizeResult, SchemaJob, ShardLayout

log = logging.getLogger("shardq.cockroach")

#: Oldest CockroachDB shardq supports: SKIP LOCKED needs >= 22.2.1, the psycopg 3 SQLAlchemy
#: dialect >= 22.2.6 / 23.1.0; 23.1 is the oldest line still tested against.
MIN_VERSION = (23, 1)
JOB_POLL_SECONDS_DEFAULT = 1.0

_VERSION = re.compile(r"v(\d+)\.(\d+)(?:\.(\d+))?")

ProgressHook = Callable[[ResizeProgress], None]


def version(session: Session) -> tuple[int, int, int] | None:
    """The server's CockroachDB version from the ``crdb_version`` parameter it reports at connect
    (``"CockroachDB CCL v24.1.1 (…)"``), or None on PostgreSQL."""
    text = session.parameter_status("crdb_version")
    match = _VERSION.search(text or "")
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def discover_layout(session: Session) -> ShardLayout:
    """The current shard column, bucket count and descriptor id of ``shardq_tasks``'s primary
    key, read in one statement (so column and count come from the same descriptor version)."""
    row = session.fetch_one("shard_layout_get")
    if row is None or row["bucket_count"] is None:
        raise NotMigrated("shardq_tasks has no hash-sharded primary key: run `shardq migrate` first")
    return ShardLayout(
        bucket_count=int(row["bucket_count"]),
        shard_column=row["shard_column"],
        table_id=int(row["table_id"]),
    )


def schema_jobs(session: Session, table_id: int | None) -> list[SchemaJob]:
    """Unfinished schema-change jobs of ``shardq_tasks`` (a resize in progress, or any other
    schema change that would make ``ALTER PRIMARY KEY`` fail)."""
    if table_id is None:
        table_id = discover_layout(session).table_id
    return [
        SchemaJob(
            job_id=int(row["job_id"]),
            job_type=row["job_type"],
            status=row["status"],
            fraction_completed=row["fraction_completed"],
            running_status=row["running_status"],
            description=row["description"],
        )
        for row in session.fetch_all("table_schema_jobs_running", {"table_id": table_id})
    ]


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

    def __init__(self, open_session: Callable[[], Session], table_id: int, poll: float, on_progress: ProgressHook | None):
        self._open = open_session
        self._table_id = table_id
        self._poll = poll
        self._on_progress = on_progress
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="shardq-resize-watch", daemon=True)

    def __enter__(self) -> "_JobWatcher":
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
                    jobs = schema_jobs(session, self._table_id)
                    if jobs:
                        _report(self._on_progress, _job_progress(jobs))
        except Exception as exc:  # noqa: BLE001 - progress is a courtesy: never let it break the resize
            log.warning("could not watch the schema-change job: %s", exc)


def wait_for_schema_jobs(
    session: Session, table_id: int, *, poll: float = JOB_POLL_SECONDS_DEFAULT, on_progress: ProgressHook | None = None
) -> None:
    """Block until ``shardq_tasks`` has no unfinished schema-change job, reporting progress."""
    pause = threading.Event()
    while True:
        jobs = schema_jobs(session, table_id)
        if not jobs:
            return
        _report(on_progress, _job_progress(jobs))
        pause.wait(poll)


def resize(
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
    wait for the table's remaining schema-change jobs; check the new layout; then try to drop the
    old shard column. CockroachDB keeps that column after the swap and a consumer still filtering
    on it would scan the whole table; once it is gone such a claim fails with
    :class:`~shardq.errors.ShardLayoutChanged` and the consumer re-discovers. If the server
    refuses the drop, the refusal is reported in ``stale_column_kept`` and consumers still switch
    within their refresh interval.

    Does not: take the table offline, move rows by hand (the schema change rewrites the index),
    or wait for the old index's GC job (it waits for ``gc.ttlseconds`` and blocks nothing).
    """
    validation.bucket_count(buckets)
    before = discover_layout(session)
    assert before.table_id is not None
    running = schema_jobs(session, before.table_id)
    if before.bucket_count == buckets:
        note = f" (schema change job {running[0].job_id} still {running[0].status})" if running else ""
        return ResizeResult("cockroachdb", buckets, buckets, False, f"already {buckets} buckets: nothing to do{note}",
                            shard_column_before=before.shard_column, shard_column_after=before.shard_column)
    if running:
        raise ResizeInProgress(
            f"a schema change of shardq_tasks is still running (job {running[0].job_id}: "
            f"{running[0].description}); wait for it before resizing"
        )
    _report(on_progress, ResizeProgress("schema-change", f"ALTER PRIMARY KEY to {buckets} buckets"))
    with _JobWatcher(open_session, before.table_id, poll, on_progress):
        session.execute_ddl("table_primary_key_alter", literals={"bucket_count": buckets})
    wait_for_schema_jobs(session, before.table_id, poll=poll, on_progress=on_progress)
    after = discover_layout(session)
    if after.bucket_count != buckets:
        raise DatabaseError(
            f"ALTER PRIMARY KEY finished but shardq_tasks has {after.bucket_count} buckets, not {buckets}"
        )
    dropped, kept = False, None
    if before.shard_column and before.shard_column != after.shard_column:
        _report(on_progress, ResizeProgress("dropping-column", f"dropping stale shard column {before.shard_column}"))
        try:
            session.execute_ddl("shard_column_drop", identifiers={"column": before.shard_column})
            wait_for_schema_jobs(session, before.table_id, poll=poll, on_progress=on_progress)
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
        "cockroachdb", before.bucket_count, buckets, True, message,
        shard_column_before=before.shard_column, shard_column_after=after.shard_column,
        stale_column_dropped=dropped, stale_column_kept=kept,
    )
