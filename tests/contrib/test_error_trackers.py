"""Task failures to error trackers (shardq.contrib.errors): Sentry through its own transport, any
logging-based tracker through a record on shardq.tasks, each with the task's id, queue, name and
attempt; Retry is not reported, and a broken reporter does not change the outcome."""

from __future__ import annotations

import logging

import pytest

import shardq
from shardq import instrumentation
from shardq.contrib import errors


@pytest.fixture
def app(db):
    app = shardq.App(db.dsn)

    @app.task(name="jobs.flaky", queue="tracked", max_attempts=2)
    def flaky() -> None:
        raise ValueError("the disk is full")

    @app.task(name="jobs.later", queue="tracked")
    def later() -> None:
        raise shardq.Retry(3600)

    @app.task(name="jobs.gone", queue="tracked")
    async def gone() -> None:
        raise shardq.Permanent("no such user")

    yield app
    app.close()


@pytest.fixture
def installed():
    chosen = []
    yield chosen.append
    for reporter in chosen:
        instrumentation.uninstall(reporter)
    assert instrumentation.active is None


def test_each_failed_attempt_reaches_sentry_through_its_transport_with_the_task_as_context(app, installed):
    sentry_sdk = pytest.importorskip("sentry_sdk")
    from sentry_sdk.transport import Transport

    events = []

    class Captured(Transport):
        def capture_envelope(self, envelope):
            events.extend(item.payload.json for item in envelope.items if item.type == "event")

    sentry_sdk.init(dsn="https://key@sentry.invalid/1", transport=Captured, default_integrations=False)
    try:
        installed(errors.report_to_sentry())
        task_id = app.tasks["jobs.flaky"].defer()
        app.tasks["jobs.later"].defer()
        app.work(until_empty=True)  # the first attempt of each (jobs.flaky's second waits for its backoff)
        sentry_sdk.flush()
    finally:
        sentry_sdk.init(dsn=None)
    assert events, "no event reached the transport"
    first = events[0]
    assert first["exception"]["values"][-1]["type"] == "ValueError"
    assert first["tags"] == {
        "shardq.queue": "tracked",
        "shardq.task": "jobs.flaky",
        "shardq.attempt": "1",
        "shardq.final": "false",
    }
    assert first["contexts"]["shardq"] == {
        "task_id": task_id,
        "queue": "tracked",
        "task": "jobs.flaky",
        "attempt": 1,
        "max_attempts": 2,
        "final": False,
    }
    assert len(events) == 1  # Retry is not a failure


def test_a_logging_tracker_gets_an_error_record_with_the_task_fields(app, installed, caplog):
    installed(errors.report_to_logging())
    task_id = app.tasks["jobs.gone"].defer()
    with caplog.at_level(logging.ERROR, logger="shardq.tasks"):
        app.work(until_empty=True)
    records = [r for r in caplog.records if r.name == "shardq.tasks"]
    assert len(records) == 1
    record = records[0]
    assert (record.task_id, record.queue, record.task, record.attempt, record.final) == (
        task_id,
        "tracked",
        "jobs.gone",
        1,
        True,
    )
    assert record.exc_info[0] is shardq.Permanent
    assert "no attempt follows" in record.getMessage()


def test_a_reporter_that_raises_changes_nothing_but_a_log_line(app, db, installed, caplog):
    def broken(exc, failure):
        raise RuntimeError("tracker down")

    installed(errors.report_failures(broken))
    app.tasks["jobs.gone"].defer()
    with caplog.at_level(logging.ERROR, logger="shardq.tasks"):
        totals = app.work(until_empty=True)
    assert totals.dead == 1
    assert "tracker down" in caplog.text
    assert db.count_dead() == 1
