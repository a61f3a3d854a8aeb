"""Execution timeouts: task over queue over worker; sync handlers abandoned and replaced, async
ones cancelled; the failure retries then dead-letters with the timeout reason; leases are not
renewed past the timeout; counted in stats; a worker that abandons too many threads stops."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import shardq
from shardq.errors import InvalidInput
from shardq.models import NewTask

RELEASE = threading.Event()  # lets abandoned handler threads end when a test is over


@pytest.fixture(autouse=True)
def _release_abandoned_threads():
    RELEASE.clear()
    yield
    RELEASE.set()


def test_a_sync_handler_past_its_timeout_is_dead_lettered_with_the_reason_while_others_finish(db):
    db.client.enqueue_many("q", [NewTask(b"hang", max_attempts=2)])
    db.client.enqueue_many("q", [b"ok"] * 100)
    db.client.set_queue("q", backoff_base=0.01, backoff_cap=0.02)

    def handler(task):
        if task.payload == b"hang":
            RELEASE.wait(3600)  # sleeps "forever": only the end of the test lets it go

    acked = timeouts = abandoned = 0
    for _ in range(20):  # a retry waits out its backoff as 'scheduled': run again until it is dead
        totals = db.client.worker(["q"], handler, concurrency=2, timeout=1, until_empty=True).run(
            install_signal_handlers=False
        )
        acked, timeouts, abandoned = acked + totals.acked, timeouts + totals.timeouts, abandoned + totals.abandoned
        if db.client.store.dead_list("q", 10):
            break
    assert acked == 100 and timeouts == 2 and abandoned == 2
    dead = db.client.store.dead_list("q", 10)
    assert len(dead) == 1 and dead[0].last_error == "timeout after 1 s" and dead[0].attempts == 2
    assert not totals.abandoned_limit_reached  # 1 of 4 (2 x concurrency) per run


def test_an_async_task_past_its_timeout_is_cancelled(app_db):
    app, db = app_db
    cancelled = []

    @app.task(name="slow", timeout=0.3, max_attempts=1)
    async def slow() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    slow.defer()
    totals = app.work(until_empty=True)
    assert cancelled == [True] and totals.timeouts == 1 and totals.dead == 1 and totals.abandoned == 0
    assert db.client.store.dead_list("default", 10)[0].last_error == "timeout after 0.3 s"


def test_the_task_timeout_wins_over_the_queue_timeout_which_wins_over_the_worker_timeout(app_db):
    app, db = app_db
    ran_for: dict[str, float] = {}

    @app.task(name="own", queue="timed", timeout=0.2, max_attempts=1)
    def own() -> None:
        started = time.monotonic()
        RELEASE.wait(3600)
        ran_for["own"] = time.monotonic() - started

    @app.task(name="queue_timeout", queue="timed", max_attempts=1)
    def queue_timeout() -> None:
        RELEASE.wait(3600)

    db.client.set_queue("timed", timeout_seconds=0.4)
    own.defer()
    queue_timeout.defer()
    totals = app.work(until_empty=True, timeout=30)
    errors = sorted(d.last_error for d in db.client.store.dead_list("timed", 10))
    assert errors == ["timeout after 0.2 s", "timeout after 0.4 s"] and totals.timeouts == 2


def test_timeouts_are_counted_in_stats(db):
    db.client.enqueue_many("q", [NewTask(b"hang", max_attempts=1)])
    db.client.worker(["q"], lambda task: RELEASE.wait(3600), timeout=0.2, until_empty=True, stats_interval=0.05).run(
        install_signal_handlers=False
    )
    queue = db.client.stats().queues["q"]
    assert queue.activity.timeouts == 1


def test_a_worker_that_abandons_too_many_threads_stops_and_says_so(db):
    db.client.enqueue_many("q", [NewTask(b"hang", max_attempts=5)] * 3)
    worker = db.client.worker(["q"], lambda task: RELEASE.wait(3600), concurrency=1, timeout=0.2, max_abandoned=2)
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    thread.join(60)
    assert not thread.is_alive()
    # The limit stops claims; a task already held may still time out while the worker finishes.
    assert worker.totals.abandoned_limit_reached and worker.totals.abandoned >= 2


def test_heartbeats_never_renew_a_lease_past_the_timeout(db):
    from shardq.lifecycle.queue_settings import QueueSettingsCache
    from shardq.sessions.per_thread import SessionPerThread
    from shardq.worker import WorkerConfig
    from shardq.worker.inflight import InFlightTable, entries_for
    from shardq.worker.lease_keeper import LeaseKeeper

    db.client.enqueue("q", b"x")
    store = db.client.store
    claimed = []
    for bucket in range(store.layout().visit_count):
        claimed += store.task_claim_batch(bucket, "q", 1, 30)
    table = InFlightTable(1, batch=1, prefetch=1, ack_batch=10)
    entries, _ = entries_for(claimed, time.monotonic() + 30)
    entries[0].running, entries[0].timeout, entries[0].timeout_at = True, 3.0, time.monotonic() + 3.0
    table.add(entries)
    keeper = LeaseKeeper(
        WorkerConfig(queues=("q",)), SessionPerThread(lambda: db.client.new_session()), table, threading.Event()
    )
    keeper.beat(QueueSettingsCache(store, ["q"], lease_override=600))
    left = db.lease_seconds_left()
    assert 1.0 <= left <= 3.5  # renewed to the timeout, not to the 600 s lease


@pytest.mark.parametrize("bad", [0, -1, float("nan")])
def test_a_timeout_that_is_not_positive_is_refused_everywhere(db, bad):
    with pytest.raises(InvalidInput):
        db.client.worker(["q"], lambda task: None, timeout=bad)
    with pytest.raises(InvalidInput):
        db.client.set_queue("q", timeout_seconds=bad)
    app = shardq.App(db.dsn)
    with pytest.raises(InvalidInput):
        app.task(timeout=bad)


def test_a_queue_timeout_can_be_removed(db):
    assert db.client.set_queue("q", timeout_seconds=5).timeout_seconds == 5
    assert db.client.set_queue("q", backoff_base=2).timeout_seconds == 5
    assert db.client.set_queue("q", timeout_clear=True).timeout_seconds is None


@pytest.fixture
def app_db(db):
    app = shardq.App(db.dsn)
    yield app, db
    app.close()
