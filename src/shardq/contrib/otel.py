"""OpenTelemetry traces and metrics for shardq (``pip install 'shardq[otel]'``).

::

    from shardq.contrib import otel
    otel.instrument()          # the global TracerProvider / MeterProvider, or pass your own

Call it in the module that declares the app, so the processes that defer and the workers that run
(``shardq work --app mod:app`` imports that module) are both instrumented.

Spans, by OpenTelemetry's messaging semantic conventions (``messaging.system`` = ``shardq``,
``messaging.destination.name`` = the queue, span names ``{operation} {queue}``)
    * ``send {queue}`` (PRODUCER) around ``defer`` / ``defer_many`` / their async forms;
      ``messaging.batch.message_count`` for a batch, ``shardq.task.name``. Its context (W3C
      ``traceparent`` through the global propagator) is stored in each task's envelope.
    * ``process {queue}`` (CONSUMER) around the task's function in the worker: a **child** of the
      ``send`` span of a single ``defer``, and linked to it in every case; for a batch (``defer_many``
      of several calls) only **linked**, since one send fans out to many traces. Attributes
      ``messaging.message.id`` (task id), ``messaging.message.delivery_attempt`` (1-based),
      ``shardq.task.name``, ``shardq.outcome`` (``success``, ``retry`` for :class:`shardq.Retry`,
      ``error``), ``error.type`` and the exception recorded as an event on failure (status ERROR).
    * ``settle {queue}`` (CLIENT), one per batch of outcomes the worker writes together (per queue
      and outcome), linked to each task's sampled ``process`` span, from the earliest end of those functions
      to the moment the outcomes were written (batched acks make them wait):
      ``messaging.operation.name`` ``ack`` / ``retry`` / ``dead_letter`` / ``lease_lost``,
      ``messaging.batch.message_count`` (or ``messaging.message.id`` for one task).

Metrics (meter ``shardq``, attribute ``messaging.destination.name``)
    ``messaging.client.consumed.messages`` (tasks claimed), ``messaging.process.duration`` (s, one per
    function run), ``messaging.client.operation.duration`` (s, claim statements,
    ``messaging.operation.name`` = ``claim``), ``shardq.tasks.settled`` (``shardq.outcome``): the
    figures :mod:`shardq.worker.metrics` exports to Prometheus.

Guarantees
    * Not installed, shardq costs one attribute check per defer and per task (see
      :mod:`shardq.instrumentation`); raw ``bytes`` payloads (``client.enqueue``) are never
      touched, so only app tasks carry their context.
    * A worker that does not know the ``"trace"`` key (older shardq) ignores it.
    * Under the SDK (its ``TracerProvider`` with its own batch or simple processors), the
      ``process`` and ``settle`` spans are made in one go when they end
      (:mod:`shardq.contrib.otel_spans`): the exporter sees the same spans, the function's own
      spans are still children of the ``process`` span, and a function that changes the current
      span gets the SDK's span. Other providers and processors get ``Tracer.start_span``.

Cost (``python -m loadtest.app_burn``, ``python -m loadtest.otel_instrument``; method, profiles
and figures in docs/otel-cost.md)
    * tracing off: one attribute check per defer and per task, no cost above the noise;
    * tracing on, tasks that wait 2 ms: burn-down about 0.95× of off; no-op tasks (the worst
      case): about 0.6× of off, the instrument costing about 15 µs of CPU per task (the SDK's
      own span alone cost about 23 µs) beside a no-op task's own 15–20 µs. A sampler keeping a
      fraction of traces (``ParentBased(TraceIdRatioBased(r))``) keeps very short tasks cheaper
      still (0.72× with 10 %): an unsampled span is non-recording, and no settle link is kept for it.

Does not
    * propagate through raw ``client.enqueue`` payloads or Spark runs (their payloads are the
      user's bytes); those workers' ``process`` spans start new traces;
    * sample, export or configure providers: that is the application's OpenTelemetry setup;
    * make spans in one go for a tracer of the global provider that was not set yet when
      :func:`instrument` ran (a proxy tracer): those take ``Tracer.start_span``. Set the provider
      first, or pass it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

from opentelemetry import context as context_api
from opentelemetry import metrics, propagate, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from shardq import instrumentation
from shardq.errors import Retry

SYSTEM = "shardq"
#: carrier key marking a context stored by a batch send (the worker links, not parents)
BATCH_KEY = "shardq-batch"
_SETTLE_NAMES = {
    "acked": "ack",
    "retried": "retry",
    "dead": "dead_letter",
    "lease_lost": "lease_lost",
    "released": "release",
}
# Process spans ended but not yet settled, by task id; bounded so a lost settle event cannot grow it.
_PENDING_MAX = 100_000
# (queue, task name) pairs whose shared span attributes are kept; more start the cache over.
_BASES_MAX = 1_000
_ROOT = context_api.Context()  # settle spans are roots: a batch settles tasks of many traces
_SUCCEEDED = {"shardq.outcome": "success"}
_RETRIED = {"shardq.outcome": "retry"}


class OpenTelemetry(instrumentation.Instrument):
    """The instrument :func:`instrument` installs (one tracer and one meter)."""

    def __init__(
        self, tracer_provider: trace.TracerProvider | None = None, meter_provider: metrics.MeterProvider | None = None
    ) -> None:
        self.tracer = trace.get_tracer("shardq", tracer_provider=tracer_provider)
        meter = metrics.get_meter("shardq", meter_provider=meter_provider)
        self.consumed = meter.create_counter(
            "messaging.client.consumed.messages", unit="{message}", description="Tasks claimed by this worker."
        )
        self.process_seconds = meter.create_histogram(
            "messaging.process.duration", unit="s", description="Time one task function took."
        )
        self.claim_seconds = meter.create_histogram(
            "messaging.client.operation.duration", unit="s", description="Time one claim statement took."
        )
        self.settled = meter.create_counter(
            "shardq.tasks.settled", unit="{message}", description="Outcomes written, by outcome."
        )
        # task id -> (process span context, end time in ns): a link and the start of its settle span
        self._pending: dict[str, tuple[trace.SpanContext, int]] = {}
        # per settler thread: (queue, outcome) -> what the batch being written settles
        self._settling = threading.local()
        # the last carrier read and its context: the calls of one defer_many share one carrier
        self._last_carrier: tuple[str | None, Any, list[Link]] = (None, None, [])
        # (queue, task name) -> the process span's name and the attributes all its tasks share
        self._bases: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
        # process and settle spans made in one go at their end, under the SDK (None: another tracer)
        self._spans = _finished_spans(self.tracer)

    # -- producer side ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def sending(self, task: str, queue: str, count: int) -> Iterator[Mapping[str, str] | None]:
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.name": "send",
            "messaging.operation.type": "send",
            "messaging.destination.name": queue,
            "shardq.task.name": task,
        }
        if count != 1:
            attributes["messaging.batch.message_count"] = count
        with self.tracer.start_as_current_span(f"send {queue}", kind=SpanKind.PRODUCER, attributes=attributes):
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            if count != 1 and carrier:
                carrier[BATCH_KEY] = "1"
            yield carrier or None

    # -- worker side -----------------------------------------------------------------------------

    def running(
        self, call: Callable[[], Any], *, is_async: bool, task: str, handle: Any, carrier: Mapping[str, str] | None
    ) -> Callable[[], Any]:
        # Written out rather than through context managers: this runs once per task, and each
        # generator-based layer (contextlib, start_as_current_span, use_span) costs microseconds a
        # no-op task notices (docs/otel-cost.md).
        if is_async:

            async def run_async() -> Any:
                started = self._start(task, handle, carrier)
                try:
                    result = await call()
                except BaseException as exc:
                    self._finish(started, exc)
                    raise
                self._finish(started, None)
                return result

            return run_async

        def run() -> Any:
            started = self._start(task, handle, carrier)
            try:
                result = call()
            except BaseException as exc:
                self._finish(started, exc)
                raise
            self._finish(started, None)
            return result

        return run

    def _sender(self, carrier: Mapping[str, str] | None) -> tuple[Any, list[Link]]:
        """The parent context (None: a new trace) and the links of a task sent with ``carrier``.
        The calls of one ``defer_many`` share one carrier: it is parsed once, not per task."""
        if not carrier:
            return None, []
        traceparent = carrier.get("traceparent")
        last, context, links = self._last_carrier
        if traceparent is None or traceparent != last:
            try:
                context = propagate.extract(carrier)
            except Exception:  # noqa: BLE001 - a malformed carrier (written by hand) must not fail the task
                context = context_api.Context()
            sent = trace.get_current_span(context).get_span_context()
            links = [Link(sent)] if sent.is_valid else []
            if self._spans is not None:
                self._spans.prepare_links(links)
            self._last_carrier = (traceparent, context, links)
        return (context if links and BATCH_KEY not in carrier else None), links

    def _start(self, task: str, handle: Any, carrier: Mapping[str, str] | None) -> tuple[Any, object, str, str, float]:
        """Start the task's ``process`` span and make it current (the function's own spans are its
        children); returns what :meth:`_finish` needs."""
        parent, links = self._sender(carrier)
        queue, task_id = handle.queue, handle.id
        base = self._bases.get((queue, task))
        if base is None:  # the attributes every task of this queue and name shares, built once
            if len(self._bases) >= _BASES_MAX:  # queues named per tenant or per run: start over
                self._bases.clear()
            base = self._bases[(queue, task)] = (
                f"process {queue}",
                {
                    "messaging.system": SYSTEM,
                    "messaging.operation.name": "process",
                    "messaging.operation.type": "process",
                    "messaging.destination.name": queue,
                    "shardq.task.name": task,
                },
            )
        name, shared = base
        attributes = {**shared, "messaging.message.id": task_id, "messaging.message.delivery_attempt": handle.attempt}
        spans = self._spans
        span = None if spans is None else spans.start(name, SpanKind.CONSUMER, parent, links, attributes)
        if span is None:
            span = self.tracer.start_span(
                name, context=parent, kind=SpanKind.CONSUMER, links=links, attributes=attributes
            )
        token = context_api.attach(trace.set_span_in_context(span))
        return span, token, queue, task_id, time.perf_counter()

    def _finish(self, started: tuple[Any, object, str, str, float], exc: BaseException | None) -> None:
        span, token, queue, task_id, t0 = started
        seconds = time.perf_counter() - t0
        context_api.detach(token)  # type: ignore[arg-type]
        if exc is None or isinstance(exc, Retry):
            outcome = _SUCCEEDED if exc is None else _RETRIED
            if self._spans is None or not self._spans.end_unchanged(span, outcome):
                span.set_attributes(outcome)
                span.end()
        else:  # a deferred process span becomes the SDK's span here (the exception event is the SDK's)
            span.set_attributes({"shardq.outcome": "error", "error.type": type(exc).__qualname__})
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, str(exc)[:200]))
            span.end()
        self.process_seconds.record(seconds, {"messaging.destination.name": queue})
        context = span.get_span_context()
        # Only a sampled span is worth a settle link: a sampler that keeps a fraction of traces
        # then spares the settle bookkeeping of the rest too.
        if context.trace_flags.sampled and len(self._pending) < _PENDING_MAX:
            self._pending[task_id] = (context, time.time_ns())

    def worker_events(self) -> tuple[instrumentation.Listener, Collection[str] | None]:
        return self.on_event, frozenset({"claim", "settled", *_SETTLE_NAMES})

    def on_event(self, event: str, task: Any, details: dict) -> None:
        """The worker's events: settle spans per settled batch, metrics per claim and batch."""
        name = _SETTLE_NAMES.get(event)
        if name is not None:
            pending = self._pending.pop(task.id, None)
            if pending is not None:  # else not run by this instrument (a raw handler, or released unrun)
                settling = self._settling.__dict__.setdefault("batch", {})
                settling.setdefault((task.queue, name), []).append((*pending, task.id))
        elif event == "settled":
            self._end_settle_spans()
            for (outcome, queue), count in details.get("counts", {}).items():
                self.settled.add(count, {"messaging.destination.name": queue, "shardq.outcome": outcome})
        elif event == "claim":
            for _bucket, queue, seconds, found in details.get("polls", ()):
                labels = {"messaging.destination.name": queue}
                if seconds is not None:
                    self.claim_seconds.record(seconds, {**labels, "messaging.operation.name": "claim"})
                if found:
                    self.consumed.add(found, labels)

    def _end_settle_spans(self) -> None:
        """One span per queue and outcome of the batch the settler just wrote, linked to each of its
        tasks' process spans (a span per task would cost as much again as the process span), from
        the earliest of their ends to now."""
        settling = self._settling.__dict__.pop("batch", None)
        for (queue, name), items in (settling or {}).items():
            attributes: dict[str, Any] = {
                "messaging.system": SYSTEM,
                "messaging.operation.name": name,
                "messaging.operation.type": "settle",
                "messaging.destination.name": queue,
            }
            if len(items) == 1:
                attributes["messaging.message.id"] = items[0][2]
            else:
                attributes["messaging.batch.message_count"] = len(items)
            contexts = [context for context, _end, _id in items]
            started = min(end for _c, end, _i in items)
            spans = self._spans
            if spans is not None:
                span = spans.start(
                    f"settle {queue}", SpanKind.CLIENT, _ROOT, spans.links_to(contexts), attributes, started
                )
                if span is not None:
                    if not spans.end_unchanged(span, {}):  # unsampled, or the SDK's span after all
                        span.end()
                    continue
            span = self.tracer.start_span(
                f"settle {queue}",
                context=_ROOT,
                kind=SpanKind.CLIENT,
                links=[Link(context) for context in contexts],
                attributes=attributes,
                start_time=started,
            )
            span.end()


def _finished_spans(tracer: trace.Tracer) -> Any:
    """Spans made in one go for ``tracer`` if it is the SDK's (None without the SDK installed)."""
    try:
        from shardq.contrib.otel_spans import FinishedSpans
    except ImportError:  # the API alone: its no-op tracer costs nothing to start spans with
        return None
    return FinishedSpans.of(tracer)


_installed: OpenTelemetry | None = None


def instrument(
    tracer_provider: trace.TracerProvider | None = None, meter_provider: metrics.MeterProvider | None = None
) -> OpenTelemetry:
    """Install OpenTelemetry tracing and metrics for this process (the global providers unless
    given); a second call replaces the first. Returns the instrument."""
    global _installed
    uninstrument()
    _installed = OpenTelemetry(tracer_provider, meter_provider)
    instrumentation.install(_installed)
    return _installed


def uninstrument() -> None:
    """Remove what :func:`instrument` installed (no-op when nothing is)."""
    global _installed
    if _installed is not None:
        instrumentation.uninstall(_installed)
        _installed = None
