"""Priorities, scheduling, exclusive keys with a backlog, pause/resume, cancel, lease extension."""

from __future__ import annotations

import datetime as dt
import itertools
import random
import threading
import time
import uuid
from collections import defaultdict

import pytest

from shardq import InvalidInput, NewTask, QueuePaused
from shardq.lifecycle.claim import Consumer
from shardq.maintenance.reaper import Reaper
from shardq.sessions.store import TaskStore
from tests.support.factories import fenced, utcnow


def drain_claims(db, queue="q", batch=1000):
    consumer = Consumer(db.store, [queue], batch=batch)
    batches = []
    while not (found := consumer.claim()).round_empty:
        batches.append(found.tasks)
    return batches


# -- priorities ------------------------------------------------------------------------------


def test_lower_priority_value_is_claimed_first_then_earliest_exec_time(pg_db):
    base = utcnow() - dt.timedelta(minutes=5)
    order = [(5, 0), (1, 2), (3, 0), (1, 1), (-2, 9)]
    for priority, offset in order:
        pg_db.make_task(
            bucket=0,
            priority=priority,
            exec_time=base + dt.timedelta(seconds=offset),
            payload=f"{priority}/{offset}".encode(),
        )
    claimed = pg_db.store.task_claim_batch(0, "q", 10, 30)
    assert [t.payload for t in claimed] == [b"-2/9", b"1/1", b"1/2", b"3/0", b"5/0"]


def test_every_claim_batch_is_in_priority_order(db):
    rng = random.Random(1)
    db.client.enqueue_many("q", [NewTask(b"x", priority=rng.randint(-5, 5)) for _ in range(300)])
    for batch in drain_claims(db):
        priorities = [t.priority for t in batch]
        assert priorities == sorted(priorities)


def test_a_low_priority_task_waits_while_its_bucket_has_higher_priority_work(pg_db):
    low = pg_db.make_task(bucket=0, priority=10)
    for _ in range(3):
        pg_db.make_task(bucket=0, priority=0)
    first = pg_db.store.task_claim_batch(0, "q", 3, 30)
    assert low.id not in {t.id for t in first}
    assert [t.id for t in pg_db.store.task_claim_batch(0, "q", 3, 30)] == [low.id]


def test_priority_out_of_range_is_rejected(db):
    with pytest.raises(InvalidInput):
        db.client.enqueue("q", b"x", priority=2**63)


# -- scheduling ------------------------------------------------------------------------------


def test_a_scheduled_task_becomes_claimable_once_due(db):
    task = db.make_task(state="scheduled", exec_time=utcnow() - dt.timedelta(seconds=1), priority=4)
    [claimed] = [t for batch in drain_claims(db) for t in batch]
    assert claimed.id == task.id and claimed.priority == 4
    assert db.task_row(task.id)["rank"] == 4


def test_reaper_promotes_due_scheduled_tasks_of_queues_nobody_polls(db):
    task = db.make_task(state="scheduled", exec_time=utcnow() - dt.timedelta(seconds=1))
    Reaper(db.store).run_once()
    row = db.task_row(task.id)
    assert row["state"] == "ready" and row["rank"] == 0


# -- exclusive keys --------------------------------------------------------------------------


def test_second_task_of_a_busy_key_waits_in_the_backlog(db):
    first = db.client.enqueue("q", b"1", exclusive_key="acct-7")
    second = db.client.enqueue("q", b"2", exclusive_key="acct-7")
    other = db.client.enqueue("q", b"3", exclusive_key="acct-8")
    assert second.backlogged_ids == second.enqueued_ids
    claimed = [t for batch in drain_claims(db) for t in batch]
    assert {t.id for t in claimed} == {first.enqueued_ids[0], other.enqueued_ids[0]}
    assert db.client.stats().queues["q"].backlog == 1


def release_ids(db, promoted_from):
    return [t.id for batch in drain_claims(db) for t in batch if t.id in promoted_from]


def test_backlog_is_released_when_the_active_task_is_acked(db):
    db.client.enqueue("q", b"1", exclusive_key="k")
    waiting = db.client.enqueue("q", b"2", exclusive_key="k").enqueued_ids[0]
    [active] = [t for batch in drain_claims(db) for t in batch]
    from shardq.lifecycle import exclusive

    key_of = {active.key.id: ("q", "k")}
    exclusive.remove_and_release(db.store, [("q", "k")], lambda: db.store.task_ack_many([fenced(active)]), key_of)
    assert [t.id for batch in drain_claims(db) for t in batch] == [waiting]


def test_backlog_is_released_when_the_active_task_fails_for_good(db):
    db.client.enqueue("q", b"poison", exclusive_key="k", max_attempts=1)
    waiting = db.client.enqueue("q", b"next", exclusive_key="k").enqueued_ids[0]
    seen = []

    def handler(task):
        seen.append(task.payload)
        if task.payload == b"poison":
            raise RuntimeError("boom")

    stats = db.client.work(["q"], handler, until_empty=True, install_signal_handlers=False)
    assert seen == [b"poison", b"next"] and stats.dead == 1 and stats.acked == 1
    assert db.dead_row(waiting) is None and db.count() == 0


def test_backlog_is_released_when_the_reaper_dead_letters_an_expired_lease(db):
    active = db.make_task(
        state="leased",
        exclusive_key="k",
        attempts=3,
        max_attempts=3,
        lease_expires_at=utcnow() - dt.timedelta(seconds=1),
    )
    waiting = db.make_task(state="backlog", exclusive_key="k")
    result = Reaper(db.store).run_once()
    assert result.dead == 1
    assert db.task_row(waiting.id)["state"] == "ready"
    assert db.task_row(active.id) is None


def test_an_expired_lease_with_attempts_left_keeps_the_key(db):
    active = db.make_task(
        state="leased", exclusive_key="k", attempts=1, lease_expires_at=utcnow() - dt.timedelta(seconds=1)
    )
    waiting = db.make_task(state="backlog", exclusive_key="k")
    Reaper(db.store).run_once()
    assert db.task_row(active.id)["state"] in ("ready", "scheduled")
    assert db.task_row(waiting.id)["state"] == "backlog"


def test_latest_only_queue_keeps_just_the_newest_backlog_entry(db):
    db.client.set_queue("q", exclusive_latest_only=True)
    db.client.enqueue("q", b"running", exclusive_key="k")
    db.client.enqueue("q", b"old", exclusive_key="k")
    newest = db.client.enqueue("q", b"new", exclusive_key="k")
    assert newest.superseded == 1
    rows = [r for r in db.tasks("payload", "backlogged") if r["backlogged"]]
    assert [bytes(r["payload"]) for r in rows] == [b"new"]


def test_exclusive_keys_never_overlap_under_concurrent_workers_and_a_reaper(db):
    db.client.set_queue("q", backoff_base=0.001, backoff_cap=0.002)
    keys = [f"key-{i}" for i in range(12)]
    tasks = [NewTask(f"{k}/{n}".encode(), exclusive_key=k) for n in range(8) for k in keys]
    db.client.enqueue_many("q", tasks)
    # two keyed tasks whose workers "crashed": the reaper hands them back while the others run
    for key in keys[:2]:
        db.make_task(state="backlog", exclusive_key=key, payload=f"{key}/crashed".encode())
    intervals = defaultdict(list)
    lock = threading.Lock()
    done = threading.Event()
    rng = random.Random(3)
    total = len(tasks) + 2
    finished = set()

    def handler(task):
        start = time.monotonic()
        time.sleep(rng.random() * 0.002)
        if rng.random() < 0.1:
            raise RuntimeError("transient")
        end = time.monotonic()
        with lock:
            intervals[task.exclusive_key].append((start, end, task.id))
            finished.add(task.id)
            if len(finished) == total:
                done.set()

    workers = [
        db.client.worker(["q"], handler, concurrency=3, batch=5, idle_min=0.001, idle_max=0.01) for _ in range(3)
    ]
    threads = [threading.Thread(target=w.run, kwargs={"install_signal_handlers": False}) for w in workers]
    for t in threads:
        t.start()
    reaper_store = TaskStore(db.client.new_session())
    reaper = Reaper(reaper_store)
    while not done.wait(0.05):
        reaper.run_once()
        if all(not t.is_alive() for t in threads):
            break
    for w in workers:
        w.stop()
    for t in threads:
        t.join(30)
    assert done.is_set(), f"only {len(finished)} of {total} finished"
    for key, spans in intervals.items():
        spans.sort()
        for (_, e1, _), (s2, _, _) in itertools.pairwise(spans):
            assert s2 >= e1, f"two tasks of {key} ran at once"
    assert db.count() == 0


# -- pause, resume, settings -----------------------------------------------------------------


def test_paused_enqueue_refuses_and_writes_nothing(db):
    db.client.pause("q", dequeue=False)
    with pytest.raises(QueuePaused):
        db.client.enqueue("q", b"x")
    assert db.count() == 0
    db.client.resume("q")
    assert db.client.enqueue("q", b"x").enqueued == 1


def test_paused_dequeue_holds_tasks_until_resumed(db):
    db.client.enqueue("q", b"x")
    db.client.pause("q", enqueue=False)
    assert drain_claims(db) == []
    assert db.client.enqueue("q", b"still accepted").enqueued == 1
    db.client.resume("q", enqueue=False)
    assert sum(len(b) for b in drain_claims(db)) == 2


def test_queue_settings_change_and_validate(db):
    settings = db.client.set_queue(
        "q", lease_seconds=120, max_attempts=3, backoff_base=2, backoff_cap=60, retry_jitter=0.5
    )
    assert (settings.lease_seconds, settings.max_attempts, settings.retry_jitter) == (120, 3, 0.5)
    assert db.client.enqueue("q", b"x").enqueued == 1
    assert db.tasks("max_attempts")[0]["max_attempts"] == 3
    for bad in ({"lease_seconds": 0}, {"lease_seconds": 0.5}, {"retry_jitter": 2}, {"max_attempts": 0}, {"bogus": 1}):
        with pytest.raises(InvalidInput):
            db.client.set_queue("q", **bad)
    assert db.client.set_queue("q", lease_seconds=1).lease_seconds == 1  # the minimum itself


def test_consumer_uses_the_queue_lease(db):
    db.client.set_queue("q", lease_seconds=600)
    db.client.enqueue("q", b"x")
    [task] = [t for b in drain_claims(db) for t in b]
    assert (task.lease_expires_at - utcnow()).total_seconds() > 590


# -- cancel ----------------------------------------------------------------------------------


def test_cancel_removes_a_ready_task(db):
    task_id = db.client.enqueue("q", b"x").enqueued_ids[0]
    missing = str(uuid.uuid4())
    result = db.client.cancel(task_id, missing)
    assert result.cancelled == (task_id,) and result.not_found == (missing,)
    assert db.count() == 0


def test_a_cancelled_leased_task_is_not_acked_by_its_worker_later(db):
    db.client.enqueue("q", b"x")
    [task] = [t for b in drain_claims(db) for t in b]
    assert db.client.cancel(task.id).cancelled == (task.id,)
    assert db.store.task_ack_many([fenced(task)]) == set()
    assert db.count() == 0


def test_cancelling_the_active_task_of_a_key_releases_its_backlog(db):
    active = db.client.enqueue("q", b"1", exclusive_key="k").enqueued_ids[0]
    waiting = db.client.enqueue("q", b"2", exclusive_key="k").enqueued_ids[0]
    assert db.client.cancel(active).promoted == 1
    assert [t.id for b in drain_claims(db) for t in b] == [waiting]


# -- leases ----------------------------------------------------------------------------------


def test_heartbeat_keeps_a_long_task_leased_past_its_lease(db):
    task_id = db.client.enqueue("q", b"x").enqueued_ids[0]
    reaped = []

    def long_task(task):
        time.sleep(2.5)  # the work itself outlives the 1 s lease
        reaped.append(Reaper(TaskStore(db.client.new_session())).run_once().reaped)

    stats = db.client.work(
        ["q"], long_task, lease_seconds=1.0, heartbeat=True, until_empty=True, install_signal_handlers=False
    )
    assert reaped == [0] and stats.acked == 1 and stats.lease_lost == 0
    assert db.task_row(task_id) is None
