"""The worker from parts: each part on its own session and thread, async handlers on one event
loop, the blocked-loop report, the claim walk's guard, and one failure settlement for worker and
reaper."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections import defaultdict
from typing import ClassVar

import pytest

from shardq import Permanent
from shardq.errors import DatabaseUnavailable
from shardq.lifecycle.claim import Consumer
from shardq.lifecycle.failures import Failure, settle_failures
from shardq.models import NewTask, QueueSettings
from shardq.models.leases import Fenced
from shardq.sessions.session import Session
from shardq.sessions.store import TaskStore
from shardq.worker import Worker, WorkerConfig, runs_on_loop


class RecordingSession(Session):
    """A session that notes the thread of every use of its connection."""

    uses: ClassVar[dict[int, set[int]]] = defaultdict(set)

    def connection(self):
        RecordingSession.uses[id(self)].add(threading.get_ident())
        return super().connection()


def test_no_session_is_used_by_two_threads(db):
    RecordingSession.uses.clear()
    db.client.enqueue_many("q", [b"x"] * 300)
    db.client.enqueue("q", b"fail")

    def handler(task):
        if task.payload == b"fail":
            raise RuntimeError("boom")  # the settler reads queue settings to decide the retry
        if task.payload == b"x" and task.attempt == 1 and task.id.endswith("0"):
            task.extend(30)  # a handler thread's own session

    config = WorkerConfig(queues=("q",), concurrency=3, batch=40, heartbeat=True, until_empty=True, stats_interval=0.01)
    worker = Worker(lambda: RecordingSession(db.dsn), handler, config)
    totals = worker.run(install_signal_handlers=False)
    assert totals.acked == 300 and totals.retried == 1
    assert len(RecordingSession.uses) >= 2  # fetcher and settler at least
    shared = {session: threads for session, threads in RecordingSession.uses.items() if len(threads) > 1}
    assert shared == {}


def test_async_handlers_overlap_on_one_event_loop(db):
    db.client.enqueue_many("q", [b"x"] * 50)
    loops = set()
    running = 0
    most = 0

    async def handler(task):
        nonlocal running, most
        loops.add(id(asyncio.get_running_loop()))
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.5)
        running -= 1

    totals = db.client.worker(["q"], handler, concurrency=50, batch=50, until_empty=True).run(
        install_signal_handlers=False
    )
    assert totals.acked == 50 and len(loops) == 1
    # (Nearly) all 50 were sleeping at once on the one loop: one after another would take 25 s.
    assert most >= 45


def test_async_handler_outcomes_are_the_same_as_sync_ones(db):
    for payload in (b"ok", b"permanent", b"boom"):
        db.client.enqueue("q", payload, max_attempts=1)

    async def handler(task):
        await asyncio.sleep(0)
        if task.payload == b"permanent":
            raise Permanent("no")
        if task.payload == b"boom":
            raise ValueError("boom")

    totals = db.client.worker(["q"], handler, until_empty=True).run(install_signal_handlers=False)
    assert (totals.acked, totals.dead, totals.handler_errors) == (1, 2, 1)
    errors = " | ".join(d.last_error or "" for d in db.client.store.dead_list("q", 10))
    assert "Permanent: no" in errors and "ValueError: boom" in errors


def test_an_async_handler_that_blocks_the_loop_is_logged_with_its_task_id(db, caplog):
    task_id = db.client.enqueue("q", b"x").enqueued_ids[0]

    async def handler(task):
        time.sleep(0.6)  # blocks the loop: nothing else can run

    caplog.set_level(logging.WARNING, logger="shardq.worker")
    totals = db.client.worker(["q"], handler, until_empty=True, blocked_loop_seconds=0.2).run(
        install_signal_handlers=False
    )
    assert totals.acked == 1 and totals.blocked_loop_reports >= 1
    assert any(task_id in r.getMessage() and "blocked the event loop" in r.getMessage() for r in caplog.records)


def test_a_stop_hands_back_async_tasks_still_running_after_the_grace_period(db):
    db.client.enqueue("q", b"x")
    running = threading.Event()

    async def handler(task):
        running.set()
        await asyncio.sleep(3600)

    worker = db.client.worker(["q"], handler, grace_seconds=0.2)
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    assert running.wait(30)
    worker.stop()
    thread.join(30)
    assert not thread.is_alive() and worker.stats.released == 1
    row = db.tasks("state", "attempts")[0]
    assert (row["state"], row["attempts"]) == ("ready", 0)


def test_handler_kinds_are_told_apart():
    async def coroutine(task): ...

    class AsyncCallable:
        async def __call__(self, task): ...

    assert runs_on_loop(coroutine) and runs_on_loop(AsyncCallable())
    assert not runs_on_loop(lambda task: None)


def test_a_worker_refuses_a_handler_that_cannot_be_called(db):
    with pytest.raises(ValueError, match="callable"):
        db.client.worker(["q"], 42)


@pytest.mark.parametrize("walk", ["per-bucket", "round"])
def test_a_claim_keeps_its_first_batch_when_the_promote_after_it_fails(pg_db, monkeypatch, walk):
    pg_db.client.enqueue_many("q", [b"a", b"b"])
    store = TaskStore(Session(pg_db.dsn))
    if walk == "per-bucket":  # a round cut into one claim statement per bucket, as on CockroachDB
        monkeypatch.setattr(store, "claim_groups", lambda visit_count, turn: [[b] for b in range(visit_count)])

    found_by_claim: list[int] = []
    original = store.claim

    def claim(*args, **kwargs):
        tasks = original(*args, **kwargs)
        found_by_claim.append(len(tasks))
        return tasks

    monkeypatch.setattr(store, "claim", claim)

    def broken(*args, **kwargs):
        if found_by_claim and found_by_claim[-1]:
            raise DatabaseUnavailable("the server went away after the claim")
        return 0

    monkeypatch.setattr(store, "promote_due", broken)
    consumer = Consumer(store, ["q"], batch=10)
    found = []
    for _ in range(consumer.layout().visit_count):
        found += consumer.claim().tasks
        if len(found) == 2:
            break
    assert len(found) == 2  # handed out, not stranded under a lease nobody holds
    store.session.close()


def test_worker_and_reaper_decide_failures_with_one_function_and_one_set_of_defaults(db):
    db.client.enqueue_many("q", [NewTask(b"a", max_attempts=2), NewTask(b"b", max_attempts=2)])
    store = db.client.store
    claimed = [
        t for group in store.claim_groups(store.layout().visit_count, 0) for t in store.claim(group, "q", 10, 30)
    ]
    first, second = claimed
    failures = [
        Failure(Fenced(first.key, first.lease_token), 1, 2, "boom"),
        Failure(Fenced(second.key, second.lease_token), 2, 2, "boom again", dead_error="last"),
        Failure(Fenced(second.key, uuid.uuid4()), 1, 2, "stale"),  # a token nobody holds
    ]
    result = settle_failures(db.client.store, failures, QueueSettings, require_expired=False)
    assert [f.error for f in result.retried] == ["boom"]
    assert [f.dead_error for f in result.dead] == ["last"]
    assert [f.error for f in result.refused_retry] == ["stale"]
    assert db.client.store.dead_list("q", 10)[0].last_error == "last"
