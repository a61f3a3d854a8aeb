"""OpenTelemetry (shardq.contrib.otel): the trace context current at defer travels in the task's
envelope to a worker in another process, whose process span is its child (linked, for a batch);
spans for send, process and settle follow the messaging conventions; nothing is written when
nothing is installed."""

from __future__ import annotations

import json
import multiprocessing

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult

from shardq import instrumentation
from shardq.contrib import otel
from tests.support.otel_worker import QUEUE, build_app, span_record, work_traced


@pytest.fixture
def exporter():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrument = otel.instrument(provider)
    yield exporter, instrument
    otel.uninstrument()
    assert instrumentation.active is None


def _payloads(db) -> list[dict]:
    return [json.loads(bytes(row["payload"])) for row in db.tasks("payload")]


def _run_worker_process(dsn) -> dict:
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    process = context.Process(target=work_traced, args=(dsn, theirs))
    process.start()
    try:
        assert ours.poll(120), "the worker process sent nothing back"
        return ours.recv()
    finally:
        process.join(30)


def test_the_worker_process_runs_each_task_in_a_child_span_of_the_span_that_deferred_it(db, exporter):
    spans, instrument = exporter
    app = build_app(db.dsn)
    try:
        with instrument.tracer.start_as_current_span("request") as request:
            single = app.tasks["otel.ok"].defer(n=1)
            failing = app.tasks["otel.fails"].defer()
            app.tasks["otel.async_ok"].defer()
            batch = app.tasks["otel.ok"].defer_many([{"n": 2}, {"n": 3}])
    finally:
        app.close()
    sent = {s.name: s for s in spans.get_finished_spans()}
    assert set(sent) == {"request", f"send {QUEUE}"}
    sends = [span_record(s) for s in spans.get_finished_spans() if s.name.startswith("send")]
    assert len(sends) == 4 and all(
        s["kind"] == "PRODUCER" and s["parent"] == request.get_span_context().span_id for s in sends
    )
    assert sends[0]["attributes"] == {
        "messaging.system": "shardq",
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
        "messaging.destination.name": QUEUE,
        "shardq.task.name": "otel.ok",
    }
    assert sends[3]["attributes"]["messaging.batch.message_count"] == 2

    result = _run_worker_process(db.dsn)
    processed = {s["attributes"]["messaging.message.id"]: s for s in result["spans"] if s["name"] == f"process {QUEUE}"}
    assert len(processed) == 5 and {single, failing, *batch} <= set(processed)
    trace_id = request.get_span_context().trace_id
    one = processed[single]
    assert (one["trace_id"], one["parent"], one["links"]) == (trace_id, sends[0]["span_id"], [sends[0]["span_id"]])
    assert one["kind"] == "CONSUMER" and one["attributes"]["shardq.outcome"] == "success"
    assert one["attributes"]["messaging.message.delivery_attempt"] == 1
    assert one["attributes"]["shardq.task.name"] == "otel.ok"
    for task_id in batch:  # a batch send: a link to it, and a trace of its own
        assert processed[task_id]["parent"] is None and processed[task_id]["links"] == [sends[3]["span_id"]]
        assert processed[task_id]["trace_id"] != trace_id
    broken = processed[failing]
    assert broken["trace_id"] == trace_id and broken["status"] == "ERROR" and broken["events"] == ["exception"]
    assert broken["attributes"]["error.type"] == "ValueError" and broken["attributes"]["shardq.outcome"] == "error"
    asynchronous = [s for s in processed.values() if s["attributes"]["shardq.task.name"] == "otel.async_ok"]
    assert len(asynchronous) == 1 and asynchronous[0]["parent"] == sends[2]["span_id"]

    settles = [s for s in result["spans"] if s["name"] == f"settle {QUEUE}"]
    settled_by = {link: s for s in settles for link in s["links"]}  # process span id -> its settle span
    assert sorted(settled_by) == sorted(s["span_id"] for s in processed.values())
    assert all(s["kind"] == "CLIENT" and s["parent"] is None for s in settles)
    assert settled_by[one["span_id"]]["attributes"]["messaging.operation.name"] == "ack"
    assert settled_by[broken["span_id"]]["attributes"]["messaging.operation.name"] == "dead_letter"
    assert {
        "messaging.client.consumed.messages",
        "messaging.process.duration",
        "messaging.client.operation.duration",
        "shardq.tasks.settled",
    } <= set(result["metrics"])


def test_a_retry_is_not_an_error_and_settles_as_retry(db, exporter):
    spans, instrument = exporter
    app = build_app(db.dsn)
    try:
        with instrument.tracer.start_as_current_span("request"):
            task_id = app.tasks["otel.again"].defer()
        app.work(until_empty=True)
    finally:
        app.close()
    finished = {s.name: s for s in spans.get_finished_spans()}
    process = finished[f"process {QUEUE}"]
    assert process.attributes["shardq.outcome"] == "retry" and process.status.status_code.name == "UNSET"
    settle = finished[f"settle {QUEUE}"]
    assert settle.attributes["messaging.message.id"] == task_id and settle.links[0].context == process.context
    assert settle.attributes["messaging.operation.name"] == "retry"


def test_without_an_instrument_the_envelope_carries_no_trace_and_with_one_the_send_span(db):
    app = build_app(db.dsn)
    try:
        app.tasks["otel.ok"].defer(n=1)  # nothing installed
        otel.instrument(TracerProvider())
        try:
            app.tasks["otel.ok"].defer(n=2)  # no span current: the send span is the trace's root
        finally:
            otel.uninstrument()
    finally:
        app.close()
    plain, traced = sorted(_payloads(db), key=lambda p: p["args"]["n"])
    assert set(plain) == {"task", "args"}
    assert set(traced["trace"]) == {"traceparent"} and traced["args"] == {"n": 2}


def test_a_raw_bytes_payload_is_stored_as_given_while_tracing(db, exporter):
    _spans, instrument = exporter
    with instrument.tracer.start_as_current_span("request"):
        db.client.enqueue("raw", b"\x00not json")
    assert [bytes(r["payload"]) for r in db.tasks("payload")] == [b"\x00not json"]


def test_a_malformed_stored_context_starts_a_new_trace_and_the_task_still_runs(db, exporter):
    spans, _instrument = exporter
    app = build_app(db.dsn)
    try:
        db.client.enqueue(
            QUEUE,
            json.dumps({"task": "otel.ok", "args": {"n": 1}, "trace": {"traceparent": 5, "shardq-batch": []}}).encode(),
        )
        totals = app.work(until_empty=True)
    finally:
        app.close()
    assert totals.acked == 1
    process = next(s for s in spans.get_finished_spans() if s.name == f"process {QUEUE}")
    assert process.parent is None and not process.links


class _OnlySendAndSettle(Sampler):
    """Records send and settle spans, never a process span (as a ratio sampler drops most)."""

    def should_sample(self, parent_context, trace_id, name, kind=None, attributes=None, links=None, trace_state=None):
        decision = Decision.DROP if name.startswith("process") else Decision.RECORD_AND_SAMPLE
        return SamplingResult(decision, attributes)

    def get_description(self) -> str:
        return "only send and settle"


def test_a_process_span_the_sampler_dropped_gets_no_settle_link(db):
    spans = InMemorySpanExporter()
    provider = TracerProvider(sampler=_OnlySendAndSettle())
    provider.add_span_processor(SimpleSpanProcessor(spans))
    instrument = otel.instrument(provider)
    app = build_app(db.dsn)
    try:
        app.tasks["otel.ok"].defer_many([{"n": 1}, {"n": 2}])
        assert app.work(until_empty=True).acked == 2
    finally:
        app.close()
        otel.uninstrument()
    names = [s.name for s in spans.get_finished_spans()]
    assert names == [f"send {QUEUE}"]  # no process span recorded, so no settle span links one
    assert not instrument._pending
