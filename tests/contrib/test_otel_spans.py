"""Process and settle spans made in one go at their end (shardq.contrib.otel_spans) against
the SDK's own spans: the same tasks run through the instrument both ways, with an id generator that
counts, hand the SDK's InMemorySpanExporter the same spans (every field but the clock); a
function's own spans are children of the process span; a processor that acts at a span's start,
or a limit that would cut attributes, gets the SDK's span."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult

from shardq.contrib import otel
from shardq.contrib.otel_spans import DeferredSpan
from shardq.errors import Retry


class _Counting(IdGenerator):
    """Ids 1, 2, 3…: two runs that start spans in the same order get the same ids."""

    def __init__(self) -> None:
        self.last = 0

    def generate_span_id(self) -> int:
        self.last += 1
        return self.last

    def generate_trace_id(self) -> int:
        self.last += 1
        return self.last


class _Handle:
    def __init__(self, number: int) -> None:
        self.id, self.queue, self.attempt = str(uuid.UUID(int=number)), "mail", 1 + number % 2


def _run(provider: TracerProvider, *, deferred: bool) -> tuple[otel.OpenTelemetry, tuple[ReadableSpan, ...]]:
    """Run a mix of tasks through a fresh instrument; the instrument and the finished spans."""
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrument = otel.OpenTelemetry(provider)
    if not deferred:
        instrument._spans = None  # the SDK's start_span for every process span
    tracer = provider.get_tracer("the application")

    def ok() -> None:
        pass

    def annotates() -> None:
        span = trace.get_current_span()
        span.set_attribute("order.id", 7)
        span.add_event("checked", {"items": 3})

    def nested() -> None:
        with tracer.start_as_current_span("render email"):
            pass

    def retries() -> None:
        raise Retry(60)

    def fails() -> None:
        raise ValueError("the disk is full")

    async def waits() -> None:
        with tracer.start_as_current_span("inside async"):
            await asyncio.sleep(0)

    with tracer.start_as_current_span("request"):
        with instrument.sending("mail.one", "mail", 1) as single:
            pass
        with instrument.sending("mail.many", "mail", 3) as batch:
            pass
    number = 0
    for carrier in (single, batch, None):
        for function in (ok, annotates, nested, retries, fails, waits):
            number += 1
            handle = _Handle(number)
            is_async = function is waits
            run = instrument.running(
                function, is_async=is_async, task=f"mail.{function.__name__}", handle=handle, carrier=carrier
            )
            with contextlib.suppress(Retry, ValueError):  # the outcome is recorded on the span
                asyncio.run(run()) if is_async else run()
            instrument.on_event("acked", handle, {})
    instrument.on_event("settled", None, {"counts": {("acked", "mail"): number}})
    return instrument, exporter.get_finished_spans()


def _without_clock(span: Any) -> dict:
    record = json.loads(span.to_json())
    record.pop("start_time"), record.pop("end_time")
    for event in record["events"]:
        event.pop("timestamp")
    record["dropped"] = (span.dropped_attributes, span.dropped_events, span.dropped_links)
    record["flags"] = int(span.context.trace_flags)
    record["scope"] = (span.instrumentation_scope.name, span.instrumentation_scope.version)
    return record


@pytest.mark.parametrize(
    "limits", [None, SpanLimits(max_links=4, max_span_attributes=8)], ids=["default limits", "few links and attributes"]
)
def test_spans_made_in_one_go_give_the_exporter_what_the_sdks_spans_give(limits):
    instrument, made_at_end = _run(TracerProvider(id_generator=_Counting(), span_limits=limits), deferred=True)
    assert instrument._spans is not None
    _, sdk_made = _run(TracerProvider(id_generator=_Counting(), span_limits=limits), deferred=False)
    assert [_without_clock(s) for s in made_at_end] == [_without_clock(s) for s in sdk_made]
    names = [s.name for s in made_at_end]
    assert names.count("process mail") == 18 and names.count("settle mail") == 1
    assert all(s.end_time is not None and s.start_time is not None and s.end_time >= s.start_time for s in made_at_end)
    settle = next(s for s in made_at_end if s.name == "settle mail")
    assert settle.dropped_links == (14 if limits else 0)  # 18 tasks settled together, 4 links kept


def test_a_function_that_starts_spans_gets_the_process_span_as_their_parent():
    _, spans = _run(TracerProvider(), deferred=True)
    by_name = {s.name: s for s in spans}
    process = {s.context.span_id: s for s in spans if s.name == "process mail"}
    for child in ("render email", "inside async"):
        parent = process[by_name[child].parent.span_id]
        assert str(parent.attributes["shardq.task.name"]) in ("mail.nested", "mail.waits")
        assert by_name[child].context.trace_id == parent.context.trace_id
    annotated = [s for s in process.values() if s.attributes["shardq.task.name"] == "mail.annotates"]
    assert len(annotated) == 3 and all(
        s.attributes["order.id"] == 7 and s.events[0].name == "checked" for s in annotated
    )


def test_while_the_task_runs_the_current_span_is_deferred_and_carries_the_process_spans_context():
    seen = []
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrument = otel.OpenTelemetry(provider)
    instrument.running(
        lambda: seen.append(trace.get_current_span()), is_async=False, task="mail.ok", handle=_Handle(1), carrier=None
    )()
    (process,) = exporter.get_finished_spans()
    assert type(seen[0]) is DeferredSpan and seen[0].real is None  # built in one go at the end
    assert seen[0].get_span_context() == process.context and process.attributes["shardq.outcome"] == "success"


class _MarksAtStart(SpanProcessor):
    def on_start(self, span, parent_context=None) -> None:
        span.set_attribute("marked.at.start", True)


class _AddsAttribute(Sampler):
    def should_sample(self, parent_context, trace_id, name, kind=None, attributes=None, links=None, trace_state=None):
        return SamplingResult(Decision.RECORD_AND_SAMPLE, {**(attributes or {}), "sampler.rule": "all"})

    def get_description(self) -> str:
        return "adds an attribute"


def test_a_processor_acting_at_start_a_cutting_limit_or_a_sampler_adding_attributes_get_the_sdks_span():
    marking = TracerProvider()
    marking.add_span_processor(_MarksAtStart())
    _, spans = _run(marking, deferred=True)
    assert all(s.attributes.get("marked.at.start") for s in spans if s.name == "process mail")

    cutting = TracerProvider(span_limits=SpanLimits(max_span_attribute_length=4))
    _, spans = _run(cutting, deferred=True)
    process = [s for s in spans if s.name == "process mail"]
    assert process and all(s.attributes["messaging.destination.name"] == "mail" for s in process)
    assert all(s.attributes["shardq.task.name"] == "mail" for s in process)  # "mail.ok" cut to 4 characters

    _, spans = _run(TracerProvider(sampler=_AddsAttribute()), deferred=True)
    assert all(s.attributes["sampler.rule"] == "all" for s in spans if s.name == "process mail")


def test_the_sdks_own_span_metrics_count_spans_made_in_one_go_as_the_sdks_spans(monkeypatch):
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    monkeypatch.setenv("OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED", "true")

    def span_metrics(deferred: bool) -> dict:
        reader = InMemoryMetricReader()
        _run(TracerProvider(meter_provider=MeterProvider(metric_readers=[reader])), deferred=deferred)
        data = reader.get_metrics_data()
        return {
            (m.name, tuple(sorted(p.attributes.items()))): p.value
            for rm in data.resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
            for p in m.data.data_points
        }

    made_at_end = span_metrics(deferred=True)
    assert made_at_end == span_metrics(deferred=False)
    assert any(name == "otel.sdk.span.started" for name, _ in made_at_end)
    assert all(value == 0 for (name, _), value in made_at_end.items() if name == "otel.sdk.span.live")
