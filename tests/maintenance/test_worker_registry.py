"""The worker registry (shardq.maintenance.worker_registry): a worker keeps one row while it runs,
with what it holds, and removes it when it stops; silent workers' rows are pruned."""

from __future__ import annotations

import threading
import uuid

from shardq.maintenance import worker_registry
from shardq.maintenance.worker_registry import Holding, WorkerRegistry
from shardq.operations import registry as plans


def _rows(db):
    return db.workers()


def test_a_beat_writes_one_row_and_the_next_refreshes_it(db):
    token = uuid.uuid4()
    held = [Holding(3, 2, [token, token])]
    now = [0.0]
    registry = WorkerRegistry(["a", "b"], 4, lambda: held[0], clock=lambda: now[0])
    assert registry.beat_if_due(db.store) == registry.every
    (row,) = _rows(db)
    assert (row["queues"], row["concurrency"], row["in_hand"], row["running"]) == (["a", "b"], 4, 3, 2)
    assert row["tokens"] == [token]
    held[0] = Holding(0, 0, [])
    now[0] = 1.0
    registry.beat_if_due(db.store)  # not due yet: nothing written
    assert _rows(db)[0]["in_hand"] == 3
    now[0] = registry.every
    registry.beat_if_due(db.store)
    (row,) = _rows(db)
    assert (row["in_hand"], row["tokens"]) == (0, [])
    assert db.store.run(plans.worker_by_token(token)) is None


def test_a_leased_task_names_its_worker_by_lease_token(db):
    task = db.make_task("q", state="leased")
    registry = WorkerRegistry(["q"], 1, lambda: Holding(1, 1, [task.lease_token]))
    registry.beat(db.store)
    found = db.store.run(plans.worker_by_token(task.lease_token))
    assert found["id"] == registry.id


def test_rows_of_silent_workers_are_pruned_by_a_live_one(db):
    gone = WorkerRegistry(["q"], 1, lambda: Holding(0, 0, []))
    gone.beat(db.store)
    db.age_workers(600)
    live = WorkerRegistry(["q"], 1, lambda: Holding(0, 0, []), stale=60)
    for _ in range(worker_registry.PRUNE_EVERY_BEATS):
        live.beat(db.store)
    assert [r["id"] for r in _rows(db)] == [live.id]


def test_a_running_worker_is_registered_and_its_row_goes_when_it_stops(db):
    db.client.enqueue("q", b"x")
    started, release = threading.Event(), threading.Event()

    def handler(task):
        started.set()
        release.wait(10)

    worker = db.client.worker(["q"], handler, concurrency=2)
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    try:
        assert started.wait(10)
        worker.lease_keeper.registry.beat(db.store)  # the thread's first beat may have come before the claim
        (row,) = _rows(db)
        assert row["id"] == worker.lease_keeper.registry.id
        assert (row["queues"], row["concurrency"], row["running"]) == (["q"], 2, 1)
        assert len(row["tokens"]) == 1
    finally:
        release.set()
        worker.stop()
        thread.join(10)
    assert _rows(db) == []
