"""Online bucket resizing on PostgreSQL (the bucket is an ordinary column; the count lives in
``shardq_buckets``). :func:`shardq.resize.resize_buckets` reaches it on PostgreSQL.

* **Grow** (N above every bucket in use): one short transaction changes the ``bucket`` column's
  DEFAULT to ``floor(random() * N)`` and records N. Nothing moves. Consumers walk the new
  buckets from their next layout refresh (every ``layout_refresh_seconds`` = 5 s, and after
  every empty round); until then a task that lands in a new bucket waits for that refresh.
* **Shrink**: the same transaction also records ``resizing_from`` = the old extent, so
  consumers and reapers keep visiting every bucket that may still hold rows. Then every row of
  the dropped buckets that is not leased (ready, scheduled, or in an exclusive key's backlog)
  moves to a random remaining bucket, in batches of ``batch`` (one statement each,
  ``SKIP LOCKED``, so claims and promotions are never blocked and never see a row twice; a
  backlog row moves only under its key's lock, so it cannot race that key's release). Leased
  rows are not moved: acks, retries and extensions address a row by its whole key, bucket
  included. Once a worker settles them (a retry or release puts them back in the same bucket,
  and the next pass moves them; the reaper does the same for expired leases) and the dropped
  buckets are empty, a last transaction drops their lease records and clears
  ``resizing_from``. The shrink therefore takes at least as long as the longest lease held in a
  dropped bucket.
* The switch transaction takes a brief ACCESS EXCLUSIVE lock for the ALTER (claims pause while
  it commits); it waits at most ``LOCK_TIMEOUT_MS`` for the lock and retries, so a long
  statement elsewhere cannot queue every claim behind it for long.
* Concurrent resizes are refused with :class:`~shardq.errors.ResizeInProgress` (a session-level
  advisory lock held for the whole run). An interrupted shrink (Ctrl-C, crash, ``stop``) leaves
  ``resizing_from`` set, which is safe: consumers keep visiting the old extent. Running the
  resize again (same N, or any other) resumes it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from shardq import validation
from shardq.errors import DatabaseError, LockTimeout, ResizeInProgress
from shardq.resize.results import ResizeProgress, ResizeResult
from shardq.sessions.session import Session
from shardq.sql.plan import Atomically, Call, Plan, SchemaChange, single

log = logging.getLogger("shardq.resize")

POLL_SECONDS_DEFAULT = 0.5
#: How long the switch transaction waits for the table lock before giving up and retrying: the
#: upper bound of the pause claims see while the bucket default changes.
LOCK_TIMEOUT_MS = 2000
SWITCH_ATTEMPTS = 10

ProgressHook = Callable[[ResizeProgress], None]
#: Rows per move statement of a shrink.
RESIZE_BATCH_DEFAULT = 1000


class PostgresResize:
    """One resize run on PostgreSQL. :meth:`run` does all of it; :meth:`drain_pass` is one pass of
    the shrink (move what can move, finish if the dropped buckets are empty) for callers that
    schedule passes themselves (tests)."""

    def __init__(
        self,
        session: Session,
        buckets: int,
        *,
        batch: int = RESIZE_BATCH_DEFAULT,
        poll: float = POLL_SECONDS_DEFAULT,
        on_progress: ProgressHook | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.session = session
        self.target = validation.bucket_count(buckets)
        self.batch = batch
        self.poll = poll
        self.on_progress = on_progress
        self.stop = stop or threading.Event()
        self.moved = 0
        self.extent = 0

    def _report(self, progress: ResizeProgress) -> None:
        if self.on_progress is not None:
            self.on_progress(progress)

    # -- the whole run ----------------------------------------------------------------------
    def run(self) -> ResizeResult:
        if not self.session.run(_row(Call("resize_lock_try", rows="one")))["locked"]:
            raise ResizeInProgress()
        try:
            return self._run_locked()
        finally:
            self._unlock()

    def _unlock(self) -> None:
        try:
            self.session.run(_row(Call("resize_lock_release", rows="one")))
        except Exception as exc:  # noqa: BLE001 - the lock dies with the connection anyway
            log.debug("could not release the resize lock explicitly: %s", exc)

    def _run_locked(self) -> ResizeResult:
        start = self.session.run(_row(Call("layout_get", rows="one")))
        before, resizing_from = start["bucket_count"], start["resizing_from"]
        self.extent = max(before, resizing_from or 0)
        if self.target == before and resizing_from is None:
            return ResizeResult("postgresql", before, before, False, f"already {before} buckets: nothing to do")
        if self.target != before:
            self.extent = self.switch()
        if self.target >= self.extent:
            message = f"resized from {before} to {self.target} buckets (new rows spread over all {self.target})"
            self._report(ResizeProgress("done", message))
            return ResizeResult("postgresql", before, self.target, True, message)
        while not self.drain_pass():
            if self.stop.wait(self.poll):
                message = (
                    f"stopped while moving rows out of buckets {self.target}..{self.extent - 1}; "
                    f"consumers still visit all {self.extent}; run the resize again to finish"
                )
                return ResizeResult("postgresql", before, self.target, True, message, complete=False, moved=self.moved)
        message = f"resized from {before} to {self.target} buckets; moved {self.moved} tasks out of dropped buckets"
        return ResizeResult("postgresql", before, self.target, True, message, moved=self.moved)

    # -- step 1: record the new count and default ------------------------------------------
    def switch(self) -> int:
        """Change the bucket default and the recorded count in one transaction; returns the
        extent rows may still occupy (the old count, or an unfinished shrink's extent)."""
        target = self.target

        def body() -> Plan[int]:
            yield from _row(Call("lock_timeout_set_local", {"ms": LOCK_TIMEOUT_MS}, rows="one"))
            row = yield from _row(Call("buckets_lock_get", rows="one"))
            extent: int = max(row["bucket_count"], row["resizing_from"] or 0)
            yield SchemaChange("bucket_default_set", literals={"bucket_count": target})
            yield Call(
                "buckets_update",
                {"bucket_count": target, "resizing_from": extent if target < extent else None},
                rows="none",
            )
            return extent

        self._report(ResizeProgress("switching", f"recording {target} buckets"))
        for attempt in range(1, SWITCH_ATTEMPTS + 1):
            try:
                extent: int = self.session.run(single(Atomically(body)))
                return extent
            except LockTimeout:
                if attempt == SWITCH_ATTEMPTS:
                    raise
                log.info(
                    "resize: shardq_tasks is busy (lock wait > %d ms); attempt %d again", LOCK_TIMEOUT_MS, attempt + 1
                )
                self.stop.wait(min(5.0, 0.1 * 2**attempt))
        raise AssertionError("unreachable")

    # -- step 2: empty the dropped buckets ---------------------------------------------------
    def drain_pass(self) -> bool:
        """Move every ready row that can move out of the dropped buckets; finish the resize when
        they are empty. Returns True once finished."""
        moved = 0
        for bucket in range(self.target, self.extent):
            while True:
                rows = self.session.run(
                    single(
                        Call(
                            "task_move_out_batch", {"bucket": bucket, "limit": self.batch, "bucket_count": self.target}
                        )
                    )
                )
                moved += len(rows)
                if len(rows) < self.batch:
                    break
        self.moved += moved
        left = self.session.run(_row(Call("task_count_beyond", {"bucket_count": self.target}, rows="one")))
        if left["movable"] == 0 and left["leased"] == 0 and self.finish():
            self._report(ResizeProgress("done", f"buckets {self.target}..{self.extent - 1} are empty", self.moved))
            return True
        phase = "moving" if moved else "waiting"
        detail = (
            f"{left['movable']} waiting and {left['leased']} leased tasks left in buckets "
            f"{self.target}..{self.extent - 1}"
        )
        self._report(ResizeProgress(phase, detail, self.moved, left["movable"], left["leased"]))
        return False

    def finish(self) -> bool:
        """Clear ``resizing_from`` if the dropped buckets are empty (re-checked under the row lock,
        together with dropping their lease records). Returns whether it did."""
        target = self.target

        def body() -> Plan[bool]:
            yield from _row(Call("buckets_lock_get", rows="one"))
            left = yield from _row(Call("task_count_beyond", {"bucket_count": target}, rows="one"))
            if left["movable"] or left["leased"]:
                return False
            yield Call("lease_delete_beyond", {"bucket_count": target}, rows="none")
            yield Call("buckets_update", {"bucket_count": target, "resizing_from": None}, rows="none")
            return True

        done: bool = self.session.run(single(Atomically(body)))
        return done


def _row(call: Call) -> Plan[dict[str, Any]]:
    """The row of a statement that always returns one: none is an error."""
    row = yield call
    if row is None:
        raise DatabaseError(f"statement {call.name} returned no row")
    return row
