"""The reaper: expired leases back to ready with backoff, or to the dead letters."""

from __future__ import annotations

import datetime as dt
import threading

from shardq.maintenance.reaper import Reaper, ReaperConfig
from shardq.sessions.store import TaskStore
from tests.support.factories import fenced, utcnow

EXPIRED = dict(state="leased")


def expired(db, **kw):
    return db.make_task(lease_expires_at=utcnow() - dt.timedelta(seconds=1), **{**EXPIRED, **kw})


def test_expired_lease_goes_back_to_ready_after_a_backoff(db):
    task = expired(db, attempts=3)
    result = Reaper(db.store).run_once()
    assert (result.retried, result.dead) == (1, 0)
    row = db.task_row(task.id)
    assert row["state"] in ("scheduled", "ready") and row["lease_token"] is None
    assert row["attempts"] == 3  # the expired attempt stays counted
    assert row["exec_time"] >= utcnow() - dt.timedelta(seconds=2)
    assert "lease expired" in row["last_error"]


def test_backoff_grows_with_attempts_and_is_capped_by_the_queue(db):
    db.client.store.queue_ensure("q")
    db.set_backoff("q", 100, 150)
    tasks = [expired(db, attempts=5) for _ in range(30)]
    Reaper(db.store).run_once()
    delays = [(db.task_row(t.id)["exec_time"] - utcnow()).total_seconds() for t in tasks]
    assert max(delays) <= 151
    assert max(delays) > 20  # full jitter over [0, 150]: 30 draws all below 20 would be absurd


def test_expired_lease_on_the_last_attempt_is_dead_lettered(db):
    task = expired(db, attempts=5, max_attempts=5)
    result = Reaper(db.store).run_once()
    assert (result.retried, result.dead) == (0, 1)
    assert db.task_row(task.id) is None
    assert "last attempt" in db.dead_row(task.id)["last_error"]


def test_live_leases_and_ready_tasks_are_left_alone(db):
    live = db.make_task(state="leased", lease_expires_at=utcnow() + dt.timedelta(minutes=5))
    ready = db.make_task()
    assert Reaper(db.store).run_once().reaped == 0
    assert db.task_row(live.id)["state"] == "leased"
    assert db.task_row(ready.id)["state"] == "ready"


def test_a_lease_extended_after_expiring_is_not_reaped(db):
    task = expired(db)
    db.store.task_extend_many([fenced(task)], 300)
    assert Reaper(db.store).run_once().reaped == 0
    assert db.task_row(task.id)["state"] == "leased"


def test_stale_ack_after_the_lease_was_reaped_changes_nothing(db):
    task = expired(db, attempts=1)
    Reaper(db.store).run_once()
    assert db.store.task_ack_many([fenced(task)]) == set()
    assert db.task_row(task.id)["state"] in ("scheduled", "ready")


def test_reaper_walks_every_bucket_in_bounded_batches(db):
    tasks = [expired(db) for _ in range(25)]
    result = Reaper(db.store, ReaperConfig(batch=3)).run_once()
    assert result.retried == 25 and result.buckets == db.layout.bucket_count
    assert all(db.task_row(t.id)["state"] in ("scheduled", "ready") for t in tasks)


def test_concurrent_reapers_reap_each_lease_once(db):
    for _ in range(60):
        expired(db, attempts=1)
    results = []
    barrier = threading.Barrier(4)

    def reap() -> None:
        store = TaskStore(db.client.new_session())
        barrier.wait()
        results.append(Reaper(store, ReaperConfig(batch=5)).run_once())

    threads = [threading.Thread(target=reap) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r.retried for r in results) == 60
    assert db.count_tasks(states=("ready", "scheduled")) == 60


def test_lease_records_of_settled_claims_are_dropped(pg_db):
    task = expired(pg_db)
    pg_db.store.task_ack_many([fenced(task)])
    assert pg_db.count("shardq_leases") == 1  # the ack did not close it: only the worker knows when a claim is settled
    result = Reaper(pg_db.store).run_once()
    assert result.leases_dropped == 1 and pg_db.count("shardq_leases") == 0
