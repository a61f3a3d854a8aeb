"""Waiting for a task's outcome from the handle defer() returns: its result or its failure, woken
by one listener per process on PostgreSQL (polling elsewhere); a timeout leaves the task alone."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable
from typing import cast

import pytest

import shardq
from shardq.lifecycle import waiting
from shardq.models.history import TaskStatus
from shardq.sessions.session import Session

DAY = 86_400.0


@pytest.fixture
def app(db):
    db.client.set_queue("kept", keep_finished_seconds=DAY)
    app = shardq.App(db.dsn)
    yield app
    app.close()


def _waiting_in_thread(handle, timeout: float = 30.0):
    box: dict = {}

    def run() -> None:
        started = time.monotonic()
        try:
            box["value"] = handle.wait(timeout)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc
        box["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=run)
    thread.start()
    return thread, box


def _listening(db) -> int:
    return db.count_sessions("shardq-outcomes")


def test_the_handle_is_the_id_and_waits_for_the_result(app):
    @app.task(name="add", queue="kept", result=True)
    def add(a: int, b: int) -> int:
        return a + b

    handle = add.defer(a=2, b=3)
    assert isinstance(handle, str) and str(uuid.UUID(handle)) == handle
    thread, box = _waiting_in_thread(handle)
    app.work(until_empty=True)
    thread.join(30)
    assert box == {"value": 5, "seconds": box["seconds"]}


def test_a_waiter_on_postgresql_is_woken_by_the_notification_not_its_poll(app, db, monkeypatch):
    if db.dialect != "postgresql":
        pytest.skip("CockroachDB has no LISTEN/NOTIFY: its waiters poll")
    monkeypatch.setattr(waiting, "POLL_MAX_SECONDS", 60.0)
    monkeypatch.setattr(waiting, "POLL_MIN_SECONDS", 60.0)

    @app.task(name="quick", queue="kept", result=True)
    def quick() -> str:
        return "ok"

    handles = [quick.defer() for _ in range(20)]
    waiters = [_waiting_in_thread(h) for h in handles]
    app.client.store.queue_get("kept")  # (a statement: the listener had time to LISTEN)
    app.work(until_empty=True)
    for thread, box in waiters:
        thread.join(30)
        assert box["value"] == "ok" and box["seconds"] < 30  # a poll would have taken 60 s
    assert _listening(db) == 1  # twenty waiters, one listening connection
    assert db.count_listeners() == 1  # the workers notify while it is there


def test_a_wait_that_times_out_raises_and_leaves_the_task_alone(app, db):
    @app.task(name="slow", queue="kept")
    def slow() -> None: ...

    handle = slow.defer()
    with pytest.raises(shardq.WaitTimeout, match="left alone"):
        handle.wait(0.05)
    assert db.task_row(handle)["state"] == "ready"


def test_a_dead_or_cancelled_task_raises_its_failure(app, db):
    @app.task(name="broken", queue="kept", max_attempts=1)
    def broken() -> None:
        raise ValueError("it broke")

    dead = broken.defer()
    cancelled = broken.defer()
    db.client.cancel(cancelled)
    app.work(until_empty=True)
    with pytest.raises(shardq.TaskDead, match="it broke") as failure:
        dead.wait(10)
    assert isinstance(failure.value.status, TaskStatus) and failure.value.status.state == "dead"
    with pytest.raises(shardq.TaskCancelled):
        cancelled.wait(10)


def test_a_task_of_a_queue_that_keeps_nothing_says_its_outcome_is_not_kept(app):
    @app.task(name="plain", queue="plain")
    def plain() -> None: ...

    handle = plain.defer()
    thread, box = _waiting_in_thread(handle)
    app.work(until_empty=True)
    thread.join(30)
    assert isinstance(box["error"], shardq.OutcomeNotKept)


def test_asyncio_code_awaits_the_handle(app):
    @app.task(name="twice", queue="kept", result=True)
    async def twice(x: int) -> int:
        return 2 * x

    async def main() -> int:
        handle = await twice.defer_async(x=21)
        worker = asyncio.get_running_loop().run_in_executor(None, lambda: app.work(until_empty=True))
        value = await handle
        await worker
        with pytest.raises(shardq.WaitTimeout):
            await (await twice.defer_async(x=1)).wait_async(0.05)
        await app.aclose()
        return value

    assert asyncio.run(main()) == 42


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_without_notifications_the_listener_declines_and_waiters_poll_until_the_outcome():
    class NoWakeups:
        class engine:
            supports_wakeups = False

        def close(self) -> None: ...

    # A stand-in for the session factory with only what start() reads: its engine and close().
    listener = waiting.OutcomeListener(cast(Callable[[], Session], NoWakeups))
    assert listener.start() is False
    reads = iter(["ready", "running", "succeeded"])
    seen = []

    def read():
        state = next(reads)
        seen.append(state)
        return shardq.TaskStatus("t", state, result="7" if state == "succeeded" else None)

    assert waiting.wait(read, uuid.uuid4(), 10.0, listener) == 7
    assert seen == ["ready", "running", "succeeded"]
    listener.close()
