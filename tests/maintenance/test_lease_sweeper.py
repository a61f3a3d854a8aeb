"""Workers recover crashed workers' tasks themselves: the lease sweeper, its turns, until-empty."""

from __future__ import annotations

import datetime as dt
import random
import threading

from shardq.maintenance.lease_sweeper import LeaseSweeper
from shardq.sessions.per_thread import SessionPerThread
from tests.support.factories import utcnow


def crashed_task(db, queue: str = "q", *, attempts: int = 1):
    """A task a crashed worker left behind: leased, its lease run out a while ago."""
    return db.make_task(queue, state="leased", attempts=attempts, lease_expires_at=utcnow() - dt.timedelta(seconds=30))


def fast_backoff(db, queue: str = "q") -> None:
    db.client.set_queue(queue, backoff_base=0.01, backoff_cap=0.01)


def sweeper(db, stop: threading.Event | None = None, *, every: float = 60.0, seed: int = 0) -> LeaseSweeper:
    return LeaseSweeper(
        SessionPerThread(db.client.new_session), stop or threading.Event(), every=every, rng=random.Random(seed)
    )


def test_until_empty_runs_a_crashed_workers_task_without_any_reaper(db):
    fast_backoff(db)
    lost = crashed_task(db)
    ran = []
    totals = db.client.work(["q"], lambda task: ran.append(task.id), until_empty=True)
    assert ran == [str(lost.key.id)]
    assert totals.acked == 1 and db.count() == 0


def test_a_running_worker_sweeps_expired_leases_of_crashed_workers(db):
    fast_backoff(db)
    lost = crashed_task(db)
    done = threading.Event()
    ran = []
    worker = db.client.worker(["q"], lambda task: (ran.append(task.id), done.set()), idle_max=0.05)
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    try:
        assert done.wait(30), "the worker never swept the expired lease"
    finally:
        worker.stop()
        thread.join()
    assert ran == [str(lost.key.id)]
    assert db.count() == 0


def test_without_sweeping_until_empty_leaves_expired_leases_alone(db):
    crashed_task(db)
    ran = []
    db.client.work(["q"], ran.append, until_empty=True, sweep=False)
    assert ran == []
    assert db.tasks("state")[0]["state"] == "leased"


def test_an_expired_lease_on_its_last_attempt_is_dead_lettered_by_the_sweep(db):
    db.make_task("q", state="leased", attempts=3, max_attempts=3, lease_expires_at=utcnow() - dt.timedelta(seconds=5))
    db.client.work(["q"], lambda task: None, until_empty=True)
    dead = db.dead_rows("last_error")
    assert len(dead) == 1 and "lease expired" in dead[0]["last_error"]


def test_a_lease_still_running_is_not_swept(db):
    live = db.make_task("q", state="leased", lease_expires_at=utcnow() + dt.timedelta(minutes=5))
    result = sweeper(db).sweep_all(db.store)
    assert result.reaped == 0
    assert db.tasks("lease_token")[0]["lease_token"] == live.lease_token


def test_a_bucket_turn_is_taken_once_per_interval(db):
    buckets = list(range(db.layout.visit_count))
    assert db.store.sweep_turns_take(buckets, 60.0) == buckets
    assert db.store.sweep_turns_take(buckets, 60.0) == []
    assert db.store.sweep_turns_take(buckets, 0.0) == buckets  # an interval of 0: due again at once


def test_a_fleet_sweeps_each_bucket_once_per_interval_however_many_workers_run(db):
    fleet = [sweeper(db, seed=n) for n in range(8)]
    swept = sum(s.run_once().buckets for _ in range(3) for s in fleet)
    assert swept == db.layout.visit_count  # 24 turns offered, every bucket swept exactly once


def test_one_worker_alone_visits_every_bucket_within_one_round(db):
    fast_backoff(db)
    lost = [
        db.make_task("q", state="leased", bucket=b, lease_expires_at=utcnow() - dt.timedelta(seconds=5))
        for b in range(db.layout.visit_count)
    ]
    alone = sweeper(db, every=0.0)
    results = [alone.run_once() for _ in range(2)]  # TURNS_PER_ROUND turns: one round
    assert sum(r.retried for r in results) == len(lost)
    assert db.count_tasks(state="leased") == 0


def test_swept_tasks_are_counted_as_expired_in_the_activity_counters(db):
    fast_backoff(db)
    crashed_task(db)
    sweeper(db).sweep_all(db.store)
    assert db.client.stats().queues["q"].activity.expired == 1
