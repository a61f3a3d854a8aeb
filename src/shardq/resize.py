"""Online bucket resizing: what ``shardq buckets resize N`` runs.

Producers, consumers and reapers keep running throughout; no task is lost, and when the resize
returns every task is in a bucket consumers visit. How it is done is the engine's business:
PostgreSQL changes the ``bucket`` column's default and moves rows out of dropped buckets
(:mod:`shardq.engine.postgresql_resize`); CockroachDB rebuilds the hash-sharded primary key with
``ALTER PRIMARY KEY`` (:mod:`shardq.engine.cockroachdb_resize`).

Options (defaults): ``batch`` rows per move statement on PostgreSQL (1000); ``poll`` seconds
between passes while only leased or locked rows remain (PostgreSQL, 0.5), or between job polls
(CockroachDB, 1.0).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from . import validation
from .db import Session
from .engine.postgresql_resize import RESIZE_BATCH_DEFAULT
from .models import ResizeProgress, ResizeResult

__all__ = ["RESIZE_BATCH_DEFAULT", "resize_buckets"]

ProgressHook = Callable[[ResizeProgress], None]


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
    return engine.resize(open_session, buckets, batch=batch, poll=poll, on_progress=on_progress, stop=stop)
