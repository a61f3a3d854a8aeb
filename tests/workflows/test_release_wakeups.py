"""A step released by its last parent's ack wakes the listening workers of its queue
(PostgreSQL LISTEN/NOTIFY, shardq.lifecycle.notify), in the ack's transaction."""

from __future__ import annotations

import threading

import pytest

import shardq
from shardq.lifecycle.claim import Consumer
from shardq.worker import fetcher as worker_module
from shardq.workflows import steps as workflows
from tests.support.factories import fenced, listening_store, wake_up_refused_once


@pytest.fixture
def app(pg_db):
    app = shardq.App(pg_db.dsn)
    yield app
    app.close()


def test_an_idle_listening_worker_starts_a_released_fan_in_without_waiting_for_its_poll(app, monkeypatch):
    # The worker serving the fan-in's queue polls only every 30 s and idles throughout: the
    # parents are acked by another worker. Polling alone would start the fan-in 15-30 s after the
    # last ack; the wake-up sent with the release must start it long before.
    monkeypatch.setattr(worker_module, "LISTEN_AFTER_EMPTY_ROUNDS", 1)
    warm, called = threading.Event(), threading.Event()

    @app.task(name="member", queue="members")
    def member(n: int) -> None: ...

    @app.task(name="callback", queue="fan-in")
    def callback() -> None:
        called.set()

    @app.task(name="warm", queue="fan-in")
    def warm_up() -> None:
        warm.set()

    worker = app.client.worker(["fan-in"], app, idle_min=30.0, idle_max=30.0)
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    try:
        warm_up.defer()
        assert warm.wait(30)  # the worker LISTENs (from its start) and has claimed once
        wf = app.workflow("fan")
        wf.add(callback.step(), after=wf.group(*[member.step(n=i) for i in range(4)]), name="fan-in")
        handle = wf.enqueue()
        app.work(["members"], until_empty=True)
        assert {s.name: s.state for s in handle.status().steps}["fan-in"] in ("ready", "succeeded")
        assert called.wait(10), "the released fan-in waited for the idle worker's poll"
    finally:
        worker.stop()
        thread.join(30)


def test_the_ack_that_releases_steps_of_two_queues_wakes_each_queue_once_at_its_commit(app, pg_db):
    @app.task(name="t", queue="a")
    def t() -> None: ...

    @app.task(name="u", queue="b")
    def u() -> None: ...

    listening = listening_store(pg_db.dsn, ["a", "b"])
    try:
        wf = app.workflow("two-queues")
        root = wf.add(t.step(), name="root")
        wf.add(t.step(), name="in-a", after=root)
        wf.add(u.step(), name="in-b", after=root)
        wf.add(u.step(), name="in-b-too", after=root)
        wf.enqueue()
        [task] = Consumer(pg_db.store, ["a"]).claim().tasks
        listening.notifications(0)  # nothing announced before the ack
        workflows.remove_and_release(pg_db.store, lambda: pg_db.store.task_ack_many([fenced(task)]), "succeeded")
        woken: list[str] = []
        while len(woken) < 2 and (more := listening.notifications(5)):
            woken += more
        assert sorted(woken) == ["a", "b"]  # "b" once for its two steps
    finally:
        listening.session.close()


def test_an_ack_whose_wake_up_the_server_refuses_still_releases_its_steps(app, pg_db):
    # PostgreSQL refuses a NOTIFY at commit once its notification queue is full (a listener that
    # stopped reading): the ack and the release must commit all the same, without the wake-up.
    @app.task(name="t")
    def t() -> None: ...

    wf = app.workflow("refused")
    wf.chain(t.step(), t.step())
    handle = wf.enqueue()
    [task] = Consumer(pg_db.store, ["default"]).claim().tasks
    with wake_up_refused_once(pg_db.store.session, "workflow_tasks_release") as calls:
        removed = workflows.remove_and_release(
            pg_db.store, lambda: pg_db.store.task_ack_many([fenced(task)]), "succeeded"
        )
    assert removed == {task.key.id} and len(calls) == 2
    assert [s.state for s in handle.status().steps] == ["succeeded", "ready"]
