"""Spans made in one go when they end: the cheap path of :mod:`shardq.contrib.otel` under the
OpenTelemetry SDK, for a task's ``process`` span and a batch's ``settle`` span (see docs/otel-cost.md).

The SDK's own span (``Tracer.start_span``) validates and copies every attribute into a locked
``BoundedAttributes``, does the same for each link, and takes its lock on every change and at its
end: more CPU than a whole no-op task costs the worker. Here the span is started as the SDK starts
one (the same parent, trace and span ids from the provider's id generator, the sampler asked once
with the same arguments, the SDK's span metrics), and while the task runs the current span is a
:class:`DeferredSpan` that carries its context; when the task ends, the finished
``ReadableSpan`` the SDK would have handed to the span processor is made once and handed to the
processor's ``on_end``.

Guarantees
    * An exporter and a span processor see what the SDK's own span gives them: name, kind,
      context (trace flags and the sampler's trace state), parent, links, attributes (the
      sampler's, then the outcome), resource, instrumentation scope, status, start and end times;
      unsampled spans are the SDK's ``NonRecordingSpan``.
    * A span the task's function starts is a child of the process span. A function that changes
      the current span (an attribute, an event, its status, its name, a link, its end) gets the
      SDK's real span, made on that first call with the start time already taken, and the rest of
      the task goes through it as before.
    * A failed task goes through the SDK's span (its exception event is the SDK's).

Does not
    * take this path unless it is sure to be faithful, checked per task: the tracer is the SDK's
      own ``Tracer``, enabled; its processor is the SDK's ``SynchronousMultiSpanProcessor`` of
      ``SimpleSpanProcessor`` / ``BatchSpanProcessor`` only (whose ``on_start`` and ``_on_ending``
      do nothing, so calling them late or not at all changes nothing); no attribute length limit
      and room for every attribute and link; the sampler gave back the attributes it was given.
      Anything else (another processor, a proxy tracer not yet resolved, another SDK) takes the
      SDK's ``start_span``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from time import time_ns
from typing import Any

from opentelemetry import context as context_api
from opentelemetry import trace as trace_api
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk import trace as sdk_trace
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import Link, SpanKind, TraceFlags

# The SDK's processors whose on_start and _on_ending are no-ops (exact types: a subclass may not be).
_INERT_AT_START = (SimpleSpanProcessor, BatchSpanProcessor)
# Attributes the instrument may add at the end (outcome, error type), kept free under the limit.
_ADDED_AT_END = 2
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)


def _kept(limit: int | None, links: Sequence[Link]) -> Sequence[Link]:
    """The links a span keeps under the SDK's ``limit``: the SDK's ``BoundedList`` (which counts
    the dropped ones) when some must go, else a tuple (what ``ReadableSpan.links`` gives anyway)."""
    if limit is not None and len(links) > limit:
        return BoundedList.from_seq(limit, links)
    return tuple(links)


class DeferredSpan(trace_api.Span):
    """The current span while a task runs: its context for children, the SDK's real span as soon
    as anything changes it (see the module doc)."""

    def __init__(
        self,
        maker: FinishedSpans,
        name: str,
        kind: SpanKind,
        context: trace_api.SpanContext,
        parent: trace_api.SpanContext | None,
        parent_context: context_api.Context | None,
        attributes: Mapping[str, Any],
        links: Sequence[Link],
        end_metrics: Any,
        start_time: int | None,
    ) -> None:
        self._maker = maker
        self._name = name
        self._kind = kind
        self._context = context
        self._parent = parent
        self._parent_context = parent_context
        self._attributes = attributes
        self._links = links
        self._end_metrics = end_metrics
        self._resource = maker.tracer.resource  # read when the span starts, as the SDK does
        self._start = time_ns() if start_time is None else start_time
        self.real: sdk_trace.Span | None = None

    def materialize(self) -> sdk_trace.Span:
        """The SDK's span for this one (made once, started at this span's start)."""
        if self.real is None:
            tracer = self._maker.tracer
            span = sdk_trace._Span(  # what Tracer.start_span makes
                name=self._name,
                context=self._context,
                parent=self._parent,
                sampler=tracer.sampler,
                resource=self._resource,
                attributes=self._attributes,
                span_processor=tracer.span_processor,
                kind=self._kind,
                links=self._links,
                instrumentation_info=tracer.instrumentation_info,
                limits=tracer._span_limits,
                instrumentation_scope=tracer._instrumentation_scope,
                record_end_metrics=self._end_metrics,
            )
            span.start(start_time=self._start, parent_context=self._parent_context)
            self.real = span
        return self.real

    def end_with(self, attributes: Mapping[str, Any]) -> None:
        """End the span (not changed by anyone) with ``attributes`` added: hand the finished span
        to the processor."""
        end = time_ns()
        tracer = self._maker.tracer
        self._end_metrics()
        tracer.span_processor.on_end(
            sdk_trace.ReadableSpan(
                name=self._name,
                context=self._context,
                parent=self._parent,
                resource=self._resource,
                attributes={**self._attributes, **attributes},
                kind=self._kind,
                links=_kept(tracer._span_limits.max_links, self._links),
                instrumentation_info=tracer.instrumentation_info,
                start_time=self._start,
                end_time=end,
                instrumentation_scope=tracer._instrumentation_scope,
            )
        )

    # -- the API: reading is answered here, any change goes to the SDK's span ----------------------

    def get_span_context(self) -> trace_api.SpanContext:
        return self._context

    def is_recording(self) -> bool:
        return self.real.is_recording() if self.real is not None else True

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        self.materialize().set_attributes(attributes)

    def set_attribute(self, key: str, value: Any) -> None:
        self.materialize().set_attribute(key, value)

    def add_event(self, name: str, attributes: Any = None, timestamp: int | None = None) -> None:
        self.materialize().add_event(name, attributes, timestamp)

    def add_link(self, context: trace_api.SpanContext, attributes: Any = None) -> None:
        self.materialize().add_link(context, attributes)

    def update_name(self, name: str) -> None:
        self.materialize().update_name(name)

    def set_status(self, status: Any, description: str | None = None) -> None:
        self.materialize().set_status(status, description)

    def record_exception(
        self, exception: BaseException, attributes: Any = None, timestamp: int | None = None, escaped: bool = False
    ) -> None:
        self.materialize().record_exception(exception, attributes, timestamp, escaped)

    def end(self, end_time: int | None = None) -> None:
        self.materialize().end(end_time)


class FinishedSpans:
    """Starts process spans for one SDK tracer the cheap way, when that is faithful (see the
    module doc); :meth:`of` says whether the tracer is the SDK's at all."""

    def __init__(self, tracer: Any) -> None:
        self.tracer = tracer
        self._checked: object = None  # the processor tuple found inert (the SDK replaces it on add)
        self._no_attributes: BoundedAttributes | None = None
        # the last parent context seen and its span's context: a defer_many's tasks share one
        self._last_parent: tuple[object, trace_api.SpanContext | None] = (None, None)

    @classmethod
    def of(cls, tracer: Any) -> FinishedSpans | None:
        # The SDK whose start_span this repeats (written against 1.45: span metrics, tracer configs, random trace ids)
        if (
            type(tracer) is not sdk_trace.Tracer
            or not hasattr(TraceFlags, "RANDOM_TRACE_ID")
            or not all(
                hasattr(tracer, name)
                for name in ("_span_limits", "_instrumentation_scope", "_tracer_metrics", "_is_enabled")
            )
        ):
            return None
        return cls(tracer)

    def _faithful(self) -> bool:
        processor = self.tracer.span_processor
        if type(processor) is not sdk_trace.SynchronousMultiSpanProcessor:
            return False
        processors = processor._span_processors
        if processors is not self._checked:
            limits = self.tracer._span_limits
            if not (
                all(type(p) in _INERT_AT_START for p in processors)
                and limits.max_span_attribute_length is None
                and limits.max_attribute_length is None
                and (limits.max_links is None or limits.max_links >= 1)
            ):
                return False
            self._checked = processors
        return bool(self.tracer._is_enabled())

    @staticmethod
    def end_unchanged(span: trace_api.Span, attributes: Mapping[str, Any]) -> bool:
        """End ``span`` with ``attributes`` added, in one go, if it is a :class:`DeferredSpan`
        nobody changed; False (nothing done) for any other span."""
        if type(span) is not DeferredSpan or span.real is not None:
            return False
        span.end_with(attributes)
        return True

    def prepare_links(self, links: list[Link]) -> None:
        """Give each link the attributes the SDK gives a span's links (as ``Span._new_links`` does;
        once per carrier, not per task)."""
        limits = self.tracer._span_limits
        for link in links:
            link._attributes = BoundedAttributes(
                limits.max_link_attributes, link.attributes, max_value_len=limits.max_attribute_length, immutable=True
            )

    def links_to(self, contexts: list[trace_api.SpanContext]) -> list[Link]:
        """Links without attributes to ``contexts`` (valid ones), as the SDK keeps them: its empty
        ``BoundedAttributes``, made once and shared (it is immutable) rather than once per link."""
        limits = self.tracer._span_limits
        if self._no_attributes is None or self._no_attributes.maxlen != limits.max_link_attributes:
            self._no_attributes = BoundedAttributes(
                limits.max_link_attributes, None, max_value_len=limits.max_attribute_length, immutable=True
            )
        return [Link(context, self._no_attributes) for context in contexts]

    def start(
        self,
        name: str,
        kind: SpanKind,
        parent_context: context_api.Context | None,
        links: list[Link],
        attributes: dict[str, Any],
        start_time: int | None = None,
    ) -> trace_api.Span | None:
        """The span as ``Tracer.start_span`` would start it; None when this path would not be
        faithful (the caller then asks the SDK)."""
        if not self._faithful():
            return None
        tracer = self.tracer
        limit = tracer._span_limits.max_span_attributes
        if limit is not None and len(attributes) + _ADDED_AT_END > limit:
            return None
        last, parent = self._last_parent
        if parent_context is None or parent_context is not last:  # None: the current context, as the SDK reads it
            parent = trace_api.get_current_span(parent_context).get_span_context()
            self._last_parent = (parent_context, parent)
        if parent is None or not parent.is_valid:
            parent = None
            trace_id = tracer.id_generator.generate_trace_id()
            random = tracer.id_generator.is_trace_id_random()
        else:
            trace_id = parent.trace_id
            random = parent.trace_flags.random_trace_id
        result = tracer.sampler.should_sample(parent_context, trace_id, name, kind, attributes, links)
        flags = _SAMPLED if result.decision.is_sampled() else _NOT_SAMPLED
        if random:
            flags = TraceFlags(flags | TraceFlags.RANDOM_TRACE_ID)
        context = trace_api.SpanContext(
            trace_id,
            tracer.id_generator.generate_span_id(),
            is_remote=False,
            trace_flags=flags,
            trace_state=result.trace_state,
        )
        end_metrics = tracer._tracer_metrics.start_span(parent, result.decision)
        if not result.decision.is_recording():
            return trace_api.NonRecordingSpan(context)
        span = DeferredSpan(
            self, name, kind, context, parent, parent_context, result.attributes, links, end_metrics, start_time
        )
        if result.attributes != attributes:  # the sampler changed them: the SDK's span cleans them
            span.materialize()
        return span
