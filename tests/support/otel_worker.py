"""The app and worker process of tests/contrib/test_otel.py: the same tasks declared on both sides, and a
worker that runs them under its own in-memory OpenTelemetry SDK and sends its finished spans and
metric names back through a pipe (spans cannot cross processes any other way in a test)."""

from __future__ import annotations

from typing import Any

import shardq
from shardq.errors import Retry

QUEUE = "traced"


def build_app(dsn: Any) -> shardq.App:
    app = shardq.App(dsn)

    @app.task(name="otel.ok", queue=QUEUE)
    def ok(n: int) -> None:
        pass

    @app.task(name="otel.fails", queue=QUEUE, max_attempts=1)
    def fails() -> None:
        raise ValueError("the disk is full")

    @app.task(name="otel.again", queue=QUEUE, max_attempts=1)
    def again() -> None:
        raise Retry(3600)

    @app.task(name="otel.async_ok", queue=QUEUE)
    async def async_ok() -> None:
        pass

    return app


def span_record(span: Any) -> dict:
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": span.context.trace_id,
        "span_id": span.context.span_id,
        "parent": span.parent.span_id if span.parent else None,
        "links": [link.context.span_id for link in span.links],
        "attributes": dict(span.attributes),
        "status": span.status.status_code.name,
        "events": [event.name for event in span.events],
    }


def work_traced(dsn: Any, pipe: Any) -> None:
    """Run every due task of build_app's queue under an in-memory SDK; send back the spans."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from shardq.contrib import otel

    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    otel.instrument(tracer_provider, MeterProvider(metric_readers=[reader]))
    app = build_app(dsn)
    try:
        app.work(until_empty=True)
    finally:
        app.close()
    data = reader.get_metrics_data()
    names = sorted({m.name for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics})
    pipe.send({"spans": [span_record(s) for s in exporter.get_finished_spans()], "metrics": names})
    pipe.close()
