"""Online bucket resizing: what ``shardq buckets resize N`` runs.

Producers, consumers and reapers keep running throughout; no task is lost, and when the resize
returns every task is in a bucket consumers visit. How it is done differs per engine, one module
each: PostgreSQL changes the ``bucket`` column's default and moves rows out of dropped buckets
(:mod:`shardq.resize.postgresql`); CockroachDB rebuilds the hash-sharded primary key with
``ALTER PRIMARY KEY`` (:mod:`shardq.resize.cockroachdb`). This package sits above the sessions
(:mod:`shardq.sessions.session`): it runs work, which the engine package never does.

Options (defaults): ``batch`` rows per move statement on PostgreSQL (1000); ``poll`` seconds
between passes while only leased or locked rows remain (PostgreSQL, 0.5), or between job polls
(CockroachDB, 1.0).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from shardq import validation
from shardq.engine import COCKROACHDB, POSTGRESQL
from shardq.engine.base import Engine
from shardq.resize import cockroachdb, postgresql
from shardq.resize.postgresql import RESIZE_BATCH_DEFAULT
from shardq.resize.results import ResizeProgress, ResizeResult
from shardq.sessions.session import Session

__all__ = ["RESIZE_BATCH_DEFAULT", "resize_buckets"]

ProgressHook = Callable[[ResizeProgress], None]
Resizer = Callable[..., ResizeResult]


def _postgresql(
    open_session: Callable[[], Session],
    buckets: int,
    *,
    batch: int,
    poll: float | None,
    on_progress: ProgressHook | None,
    stop: threading.Event | None,
) -> ResizeResult:
    with open_session() as session:
        return postgresql.PostgresResize(
            session,
            buckets,
            batch=batch,
            poll=poll if poll is not None else postgresql.POLL_SECONDS_DEFAULT,
            on_progress=on_progress,
            stop=stop,
        ).run()


def _cockroachdb(
    open_session: Callable[[], Session],
    buckets: int,
    *,
    batch: int,
    poll: float | None,
    on_progress: ProgressHook | None,
    stop: threading.Event | None,
) -> ResizeResult:
    # Both sessions read crdb_internal's jobs: they opt in to internals.
    with open_session() as opened, opened.sibling(internals=True) as session:
        return cockroachdb.resize(
            COCKROACHDB,
            session,
            buckets,
            open_session=lambda: opened.sibling(internals=True),
            poll=poll if poll is not None else cockroachdb.JOB_POLL_SECONDS_DEFAULT,
            on_progress=on_progress,
        )


#: How each engine resizes.
RESIZERS: dict[Engine, Resizer] = {POSTGRESQL: _postgresql, COCKROACHDB: _cockroachdb}


def resize_buckets(
    open_session: Callable[[], Session],
    buckets: int,
    *,
    batch: int = RESIZE_BATCH_DEFAULT,
    poll: float | None = None,
    on_progress: ProgressHook | None = None,
    stop: threading.Event | None = None,
) -> ResizeResult:
    """Change the bucket count to ``buckets`` (2..2048) online, on whichever database
    ``open_session`` connects to, and return what was done. The same count is a no-op that says
    so. ``on_progress`` is called with :class:`ResizeProgress` reports; ``stop`` (PostgreSQL) ends
    a shrink early, leaving it safe and resumable (``complete=False``)."""
    validation.bucket_count(buckets)
    validation.positive_int(batch, "resize batch", maximum=validation.BATCH_MAX)
    with open_session() as session:
        engine = session.engine
    return RESIZERS[engine](open_session, buckets, batch=batch, poll=poll, on_progress=on_progress, stop=stop)
