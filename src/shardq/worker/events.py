"""A worker's events: the ``on_event`` hook and the ``shardq.worker`` log, shared by its parts.

Every part reports through one :class:`EventSink`. Per-task DEBUG events cost an attribute check
when nobody listens: the ``trace_*`` flags say whether a hook wants them or DEBUG logging is on,
and the settler refreshes them every loop (:meth:`EventSink.refresh`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection

from shardq import instrumentation
from shardq.models.tasks import ClaimedTask

log = logging.getLogger("shardq.worker")

EventHook = Callable[[str, ClaimedTask | None, dict], None]

LEVELS = {
    "claimed": logging.DEBUG,
    "handled": logging.DEBUG,
    "acked": logging.DEBUG,
    "released": logging.DEBUG,
    "retried": logging.INFO,
    "dead": logging.INFO,
    "lease_lost": logging.WARNING,
}


class EventSink:
    """Calls ``hook(event, task or None, details)`` for the events in ``events`` (all, when None)
    and logs every task event on ``shardq.worker``. A failing hook is logged, never raised."""

    def __init__(self, hook: EventHook | None, events: Collection[str] | None) -> None:
        # An installed instrument (OpenTelemetry: settle spans, metrics) listens beside the hook.
        listener = instrumentation.active.worker_events() if instrumentation.active is not None else None
        if listener is not None:
            hook, events = listener if hook is None else instrumentation.combine_listeners([(hook, events), listener])
        self.hook = hook
        self.events = frozenset(events) if events is not None else None
        self.trace_claimed = self.trace_handled = self.trace_outcomes = False
        self.refresh()

    def wants(self, event: str) -> bool:
        return self.hook is not None and (self.events is None or event in self.events)

    def refresh(self) -> None:
        """Re-read whether per-task DEBUG events have a listener."""
        debug = log.isEnabledFor(logging.DEBUG)
        self.trace_claimed = debug or self.wants("claimed")
        self.trace_handled = debug or self.wants("handled")
        self.trace_outcomes = debug or self.wants("acked") or self.wants("released")

    def emit(self, event: str, task: ClaimedTask | None = None, **details: object) -> None:
        if task is not None:
            level = LEVELS.get(event, logging.DEBUG)
            if log.isEnabledFor(level):
                _log_task_event(level, event, task, details)
        hook = self.hook
        if hook is not None and (self.events is None or event in self.events):
            try:
                hook(event, task, details)
            except Exception:  # a broken metrics hook must not break the worker
                log.exception("on_event hook failed for %s", event)


def _log_task_event(level: int, event: str, task: ClaimedTask, details: dict) -> None:
    """One log line per task event, with its context as ``extra`` fields (JSON logs show them)."""
    extra = {
        "event": event,
        "task_id": task.id,
        "queue": task.queue,
        "bucket": task.key.bucket,
        "attempt": task.attempt,
        **details,
    }
    if event == "lease_lost":
        message = "task %s (queue %s, bucket %s, attempt %d): lease lost before %s; the outcome changed nothing"
        args: tuple[object, ...] = (task.id, task.queue, task.key.bucket, task.attempt, details.get("outcome"))
    else:
        message = "task %s %s (queue %s, bucket %s, attempt %d)"
        args = (task.id, event, task.queue, task.key.bucket, task.attempt)
        if "last_error" in details:
            message += ": %s"
            args += (str(details["last_error"]).splitlines()[-1] if details["last_error"] else "",)
    log.log(level, message, *args, extra=extra)
