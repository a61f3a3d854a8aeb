"""LISTEN/NOTIFY wake-ups: throttled producer notifications, listening workers, polling fallback."""

from __future__ import annotations

import logging
import threading

import pytest

from shardq.client import Client
from shardq.errors import DatabaseUnavailable
from shardq.lifecycle import notify
from shardq.lifecycle.enqueue import Producer
from shardq.lifecycle.notify import Listener, Notifier
from shardq.sessions.session import Session
from shardq.sessions.store import TaskStore
from shardq.worker import fetcher as worker_module
from tests.support.probes import backend_pid


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_notifier_lets_one_wake_up_per_queue_through_per_interval():
    clock = FakeClock()
    notifier = Notifier(0.05, clock=clock)
    assert notifier.due("a") and notifier.due("b")
    assert not notifier.due("a")
    clock.now += 0.049
    assert not notifier.due("a")
    clock.now += 0.002
    assert notifier.due("a") and not notifier.due("a")


def _listening(pg_db, queues):
    store = TaskStore(Session(pg_db.dsn))
    listener = Listener(store, queues)
    assert listener.start()
    return store, listener


def test_a_listener_wakes_for_its_queues_only(pg_db):
    store, listener = _listening(pg_db, ["a"])
    stop = threading.Event()
    pg_db.store.queue_notify("b")
    assert listener.wait(0.2, stop) is False
    pg_db.store.queue_notify("a")
    assert listener.wait(30, stop) is True
    store.session.close()


def test_a_listener_returns_at_once_when_asked_to_stop(pg_db):
    store, listener = _listening(pg_db, ["a"])
    stop = threading.Event()
    stop.set()
    assert listener.wait(30, stop) is False
    store.session.close()


def test_a_lost_listening_connection_listens_again_once_it_reconnects(pg_db):
    store, listener = _listening(pg_db, ["a"])
    stop = threading.Event()
    pid = backend_pid(store.session)
    pg_db.terminate_backend(pid)
    assert listener.wait(5, stop) is False  # the loss ends the wait: the worker polls instead
    assert store.notifications(0) == []  # reconnects, and LISTENs again
    pg_db.store.queue_notify("a")
    assert listener.wait(30, stop) is True
    store.session.close()


def test_producer_notifies_after_enqueueing_tasks_due_now_but_not_scheduled_ones(pg_db):
    store, listener = _listening(pg_db, ["q"])
    stop = threading.Event()
    producer = Producer(pg_db.store, notifier=Notifier(0.0))
    producer.enqueue("q", b"later", delay=3600)
    assert listener.wait(0.2, stop) is False
    producer.enqueue("q", b"now")
    assert listener.wait(30, stop) is True
    store.session.close()


@pytest.fixture
def first_listen_fails(monkeypatch):
    """The first LISTEN of the test meets an unreachable database; later ones work. Yields the
    number of LISTEN attempts so far (a list, one entry per attempt)."""
    attempts = []
    listen = TaskStore.notify_listen

    def flaky(store: TaskStore) -> None:
        attempts.append(store)
        if len(attempts) == 1:
            raise DatabaseUnavailable("connection refused (injected)")
        listen(store)

    monkeypatch.setattr(TaskStore, "notify_listen", flaky)
    return attempts


def test_a_listener_whose_listen_failed_tries_again_only_after_the_retry_interval(pg_db, first_listen_fails):
    store = TaskStore(Session(pg_db.dsn))
    clock = FakeClock()
    listener = Listener(store, ["a"], retry_seconds=10.0, clock=clock)
    assert listener.start() is False and not listener.active
    clock.now += 9.9
    assert listener.retry() is False and len(first_listen_fails) == 1  # throttled: not even tried
    clock.now += 0.2
    assert listener.retry() is True and listener.active and len(first_listen_fails) == 2
    pg_db.store.queue_notify("a")
    assert listener.wait(30, threading.Event()) is True
    store.session.close()


def _second_task_starts_by_wake_up(pg_db, arrange=None) -> bool:
    """Runs a worker that polls only every 30 s; once it has started a first task, enqueues a
    second with a wake-up. Returns whether the second started within 10 s (polling would not).
    The first task is enqueued without a wake-up before the worker starts, or by
    ``arrange(loud)`` (called before the worker starts; ``loud`` is a client that wakes)."""
    quiet = Client(pg_db.dsn, notify=False)
    loud = Client(pg_db.dsn)
    if arrange is None:
        quiet.enqueue("q", b"first")
    else:
        arrange(loud)
    first, second = threading.Event(), threading.Event()

    def handler(task) -> None:
        (first if task.payload == b"first" else second).set()

    worker = quiet.worker(["q"], handler, idle_min=30.0, idle_max=30.0)
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    try:
        assert first.wait(30)  # the worker has LISTENed (before or right after its first claim) and is busy
        loud.enqueue("q", b"second")
        return second.wait(10)
    finally:
        worker.stop()
        thread.join(30)
        quiet.close()
        loud.close()


def test_an_idle_listening_worker_starts_a_new_task_without_waiting_for_its_poll(pg_db, monkeypatch):
    # Polling alone would wait 15-30 s here; the wake-up must start the task long before. (The
    # worker listens from its first empty round here, not its second, so the test need not
    # wait through a back-off.)
    monkeypatch.setattr(worker_module, "LISTEN_AFTER_EMPTY_ROUNDS", 1)
    assert _second_task_starts_by_wake_up(pg_db)


def test_a_worker_whose_first_listen_failed_listens_again_once_a_claim_succeeds(
    pg_db, monkeypatch, first_listen_fails, caplog
):
    monkeypatch.setattr(worker_module, "LISTEN_AFTER_EMPTY_ROUNDS", 1)
    monkeypatch.setattr(notify, "LISTEN_RETRY_SECONDS", 0.0)  # retry right after the first claim
    caplog.set_level(logging.INFO, logger="shardq.lifecycle.notify")
    assert _second_task_starts_by_wake_up(pg_db)
    assert len(first_listen_fails) == 2
    resumed = [r for r in caplog.records if r.name == "shardq.lifecycle.notify" and "again" in r.getMessage()]
    assert len(resumed) == 1 and resumed[0].levelno == logging.INFO


def test_a_wake_up_for_the_task_a_worker_just_took_itself_does_not_make_it_deaf_to_the_next(pg_db, monkeypatch):
    # The worker's first round takes a task whose enqueue committed (and sent its wake-up) while
    # the round ran, so that wake-up is waiting on the connection when the round ends. Answering
    # it finds nothing, because the worker took that task itself: no other worker was first, so
    # the worker must go on listening rather than sit out its 15-30 s pause.
    from shardq.lifecycle.claim import Consumer

    monkeypatch.setattr(worker_module, "LISTEN_AFTER_EMPTY_ROUNDS", 1)
    claim, rounds = Consumer.claim, []

    def enqueue_during_the_first_round(loud: Client) -> None:
        def claiming(self, *args, **kwargs):
            rounds.append(kwargs.get("woken"))
            if len(rounds) == 1:
                loud.enqueue("q", b"first")  # commits, and sends its wake-up, as the round begins
            return claim(self, *args, **kwargs)

        monkeypatch.setattr(Consumer, "claim", claiming)

    assert _second_task_starts_by_wake_up(pg_db, enqueue_during_the_first_round), (
        "the worker sat out the wake-up of a task nobody else could take"
    )
    assert rounds[:2] == [False, True]  # the second round answered the first task's wake-up
