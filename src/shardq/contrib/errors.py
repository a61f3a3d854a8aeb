"""A task's failure reported to an error tracker, with the task's id, queue, name and attempt.

::

    from shardq.contrib import errors
    errors.report_to_sentry()      # pip install 'shardq[sentry]'; after sentry_sdk.init(...)
    errors.report_to_logging()     # any logging-based tracker: logger "shardq.tasks", ERROR
    errors.report_failures(lambda exc, failure: my_tracker.notify(exc, failure.as_dict()))

Call one in the module that declares the app (the worker imports it), like
:func:`shardq.contrib.otel.instrument`. Each is an :class:`~shardq.instrumentation.Instrument`
that wraps the app's task functions in the worker (:mod:`shardq.instrumentation`).

Guarantees
    * Every exception a task function raises is reported once per attempt, except
      :class:`shardq.Retry` (a request, not a failure); :class:`shardq.Permanent` is reported
      with ``final=True``, like the last allowed attempt.
    * The exception is re-raised unchanged: the worker retries or dead-letters as without a
      reporter. A reporter that raises is logged on ``shardq.tasks`` and changes nothing else.
    * :func:`report_to_sentry`: one Sentry event per failure in a scope of its own, tags
      ``shardq.queue``, ``shardq.task``, ``shardq.attempt``, ``shardq.final`` and the context
      ``shardq`` (:meth:`Failure.as_dict`).
    * :func:`report_to_logging`: one ``ERROR`` record on ``shardq.tasks`` with ``exc_info`` and the
      fields of :meth:`Failure.as_dict` as ``extra`` attributes (``task_id``, ``queue``, ``task``,
      ``attempt``, ``max_attempts``, ``final``).

Does not
    * see raw handlers (``client.work(queue, handler)``): they are not an app's tasks; report from
      the handler, or read the worker's ``retried`` / ``dead`` events (``on_event``);
    * deduplicate: Sentry's LoggingIntegration also turns ERROR records into events, so use one
      of the two reporters with Sentry, not both.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from shardq import instrumentation
from shardq.errors import Permanent, Retry

log = logging.getLogger("shardq.tasks")


@dataclass(frozen=True)
class Failure:
    """The task whose function raised: ``task_id``, ``queue``, ``task`` (its name), ``attempt``
    (1-based), ``max_attempts``, and ``final`` (no attempt follows: the last one allowed, or
    :class:`shardq.Permanent`)."""

    task_id: str
    queue: str
    task: str
    attempt: int
    max_attempts: int
    final: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


Report = Callable[[BaseException, Failure], None]


class FailureReporter(instrumentation.Instrument):
    """Calls ``report(exception, failure)`` when an app task's function raises (see the module)."""

    def __init__(self, report: Report) -> None:
        self.report = report

    def running(
        self, call: Callable[[], Any], *, is_async: bool, task: str, handle: Any, carrier: Any
    ) -> Callable[[], Any]:
        if is_async:

            async def run_async() -> Any:
                try:
                    return await call()
                except Exception as exc:
                    self._failed(exc, task, handle)
                    raise

            return run_async

        def run() -> Any:
            try:
                return call()
            except Exception as exc:
                self._failed(exc, task, handle)
                raise

        return run

    def _failed(self, exc: Exception, task: str, handle: Any) -> None:
        if isinstance(exc, Retry):
            return
        final = isinstance(exc, Permanent) or handle.attempt >= handle.max_attempts
        failure = Failure(handle.id, handle.queue, task, handle.attempt, handle.max_attempts, final)
        try:
            self.report(exc, failure)
        except Exception:  # a broken tracker must not change the task's outcome
            log.exception("reporting the failure of task %s to the tracker failed", handle.id)


def report_failures(report: Report) -> FailureReporter:
    """Install ``report(exception, failure)`` for every failing app task; returns the instrument
    (:func:`shardq.instrumentation.uninstall` removes it)."""
    reporter = FailureReporter(report)
    instrumentation.install(reporter)
    return reporter


def to_logging(logger: logging.Logger = log) -> Report:
    """A report writing one ERROR record with ``exc_info`` and the failure as ``extra``."""

    def report(exc: BaseException, failure: Failure) -> None:
        logger.error(
            "task %s (%s on %s) failed on attempt %d of %d%s",
            failure.task_id,
            failure.task,
            failure.queue,
            failure.attempt,
            failure.max_attempts,
            "" if not failure.final else "; no attempt follows",
            exc_info=exc,
            extra=failure.as_dict(),
        )

    return report


def to_sentry(exc: BaseException, failure: Failure) -> None:
    """A report sending one Sentry event (``sentry_sdk.capture_exception``) in a scope of its own."""
    import sentry_sdk

    with sentry_sdk.new_scope() as scope:
        scope.set_tag("shardq.queue", failure.queue)
        scope.set_tag("shardq.task", failure.task)
        scope.set_tag("shardq.attempt", str(failure.attempt))  # Sentry's tags are strings
        scope.set_tag("shardq.final", str(failure.final).lower())
        scope.set_context("shardq", failure.as_dict())
        sentry_sdk.capture_exception(exc)


def report_to_logging(logger: logging.Logger = log) -> FailureReporter:
    """:func:`report_failures` with :func:`to_logging`."""
    return report_failures(to_logging(logger))


def report_to_sentry() -> FailureReporter:
    """:func:`report_failures` with :func:`to_sentry` (call ``sentry_sdk.init`` as usual)."""
    return report_failures(to_sentry)
