"""The worker runtime: handlers, outcomes, until-empty, graceful shutdown."""

from __future__ import annotations

import threading

import pytest

from shardq import Permanent
from shardq.worker import WorkerConfig


def run(db, handler, **options):
    options.setdefault("until_empty", True)
    worker = db.client.worker(["q"], handler, **options)
    return worker.run(install_signal_handlers=False)


def test_worker_processes_every_task_and_stops_when_empty(db):
    db.client.enqueue_many("q", [str(i).encode() for i in range(500)])
    seen = []
    lock = threading.Lock()

    def handler(task):
        with lock:
            seen.append(task.payload)

    stats = run(db, handler, concurrency=3, batch=50)
    assert sorted(seen) == sorted(str(i).encode() for i in range(500))
    assert stats.acked == 500 and stats.lease_lost == 0
    assert db.count() == 0 and db.count("shardq_leases") in (0,) if db.dialect == "postgresql" else True


def test_handler_gets_id_queue_payload_and_one_based_attempt(db):
    result = db.client.enqueue("q", b"body")
    got = []
    run(db, lambda t: got.append((t.id, t.queue, t.payload, t.attempt)))
    assert got == [(result.enqueued_ids[0], "q", b"body", 1)]


def test_failing_handler_is_retried_with_backoff_until_it_succeeds(db):
    db.client.store.queue_ensure("q")
    db.set_backoff("q", 0.001, 0.001)
    db.client.enqueue("q", b"x")
    attempts = []

    def flaky(task):
        attempts.append(task.attempt)
        if task.attempt < 3:
            raise RuntimeError("not yet")

    done = threading.Event()
    worker = db.client.worker(["q"], lambda t: (flaky(t), done.set()), idle_min=0.001, idle_max=0.01)
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    assert done.wait(30)
    worker.stop()
    thread.join()
    assert attempts == [1, 2, 3]
    assert worker.stats.retried == 2 and worker.stats.acked == 1
    assert db.count() == 0


def test_permanent_error_dead_letters_at_once(db):
    result = db.client.enqueue("q", b"x")

    def handler(task):
        raise Permanent("cannot ever work")

    stats = run(db, handler)
    assert stats.dead == 1 and stats.retried == 0
    assert "cannot ever work" in db.dead_row(result.enqueued_ids[0])["last_error"]


def test_last_attempt_failure_dead_letters(db):
    result = db.client.enqueue("q", b"x", max_attempts=1)
    stats = run(db, lambda t: 1 / 0)
    assert stats.dead == 1
    assert "ZeroDivisionError" in db.dead_row(result.enqueued_ids[0])["last_error"]


def test_task_extend_from_inside_a_handler_renews_the_lease(db):
    result = db.client.enqueue("q", b"x")
    expiries = []

    def handler(task):
        before = task.lease_expires_at
        expiries.append((before, task.extend(3600)))

    run(db, handler, lease_seconds=5)
    before, after = expiries[0]
    assert (after - before).total_seconds() > 3000
    assert db.task_row(result.enqueued_ids[0]) is None


def test_task_extend_refuses_a_lease_shorter_than_a_second(db):
    from shardq import InvalidInput

    result = db.client.enqueue("q", b"x")
    refused, renewed = [], []

    def handler(task):
        try:
            task.extend(0.5)
        except InvalidInput as exc:
            refused.append(str(exc))
        renewed.append(task.extend(1))  # the minimum itself is a valid lease

    stats = run(db, handler, lease_seconds=1)
    assert len(refused) == 1 and "at least 1 second" in refused[0]
    assert len(renewed) == 1 and stats.acked == 1 and db.task_row(result.enqueued_ids[0]) is None


def test_graceful_stop_finishes_running_tasks_and_hands_back_the_rest_at_once(db):
    db.client.enqueue_many("q", [b"x"] * 20)
    started = threading.Semaphore(0)
    release = threading.Event()

    def slow(task):
        started.release()
        release.wait(30)

    worker = db.client.worker(["q"], slow, concurrency=2, batch=10, grace_seconds=30)
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    assert started.acquire(timeout=30) and started.acquire(timeout=30)
    worker.stop()
    release.set()
    thread.join(30)
    assert not thread.is_alive()
    stats = worker.stats
    assert stats.acked == 2
    assert stats.released == stats.claimed - 2
    rows = db.tasks("state", "attempts", "lease_token")
    assert len(rows) == 18
    assert all(r["state"] == "ready" and r["attempts"] == 0 and r["lease_token"] is None for r in rows)


def test_tasks_still_running_after_the_grace_period_are_handed_back(db):
    db.client.enqueue("q", b"x")
    started = threading.Event()
    release = threading.Event()

    def stuck(task):
        started.set()
        release.wait(60)

    worker = db.client.worker(["q"], stuck, concurrency=1, grace_seconds=0.2)
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    assert started.wait(30)
    worker.stop()
    thread.join(30)
    release.set()
    assert worker.stats.released == 1
    assert db.tasks("state")[0]["state"] == "ready"


def test_until_empty_waits_for_its_own_in_flight_tasks(db):
    db.client.enqueue_many("q", [b"x"] * 5)
    stats = run(db, lambda t: None, concurrency=1, batch=1)
    assert stats.acked == 5


@pytest.mark.parametrize(
    "bad",
    [
        {"concurrency": 0},
        {"batch": 0},
        {"lease_seconds": -1},
        {"lease_seconds": 0.5},
        {"grace_seconds": -1},
        {"queues": ()},
    ],
)
def test_worker_config_rejects_bad_values(bad):
    from shardq import InvalidInput

    options = {"queues": ("q",), **bad}
    with pytest.raises(InvalidInput):
        WorkerConfig(**options).validate()
