"""Per-queue shares of a worker's handlers (shardq.worker.shares): a flood in one queue takes only its
share; the other queues' tasks still start; bad shares are refused before anything runs."""

from __future__ import annotations

import threading

import pytest

from shardq.errors import InvalidInput
from shardq.worker import shares
from shardq.worker.config import WorkerConfig
from shardq.worker.inflight import InFlightTable

WAIT = 30.0  # seconds an event may take at most on a loaded machine (it is set long before)


def test_a_plan_gives_each_share_its_handlers_and_the_rest_to_the_others():
    lanes = shares.plan(["emails", "reports", "misc", "more"], 12, {"emails": 8, "reports": 2})
    assert lanes is not None
    assert lanes.sizes == (8, 2, 2)
    assert dict(lanes.of_queue) == {"emails": 0, "reports": 1, "misc": 2, "more": 2}
    assert [lanes.lane_of_slot(i) for i in (0, 7, 8, 9, 10, 11)] == [0, 0, 1, 1, 2, 2]


def test_when_every_queue_has_a_share_the_worker_runs_the_shares():
    config = WorkerConfig(queues=("a", "b"), concurrency=10, shares={"a": 3, "b": 1}).validate()
    assert config.handlers == 4
    assert shares.plan(["a"], 4, {}) is None


@pytest.mark.parametrize(
    ("queues", "concurrency", "given", "message"),
    [
        (("a", "b"), 4, {"a": 0}, "positive whole number"),
        (("a", "b"), 4, {"a": 2.5}, "positive whole number"),
        (("a", "b"), 4, {"c": 1}, "does not serve: c"),
        (("a", "b"), 4, {"a": 5}, "more than the worker's concurrency 4"),
        (("a", "b"), 4, {"a": 4}, "leave none for b"),
        (("a", "b"), 4, [("a", 1), ("a", 2)], "two shares"),
    ],
)
def test_bad_shares_are_refused(queues, concurrency, given, message):
    with pytest.raises(InvalidInput, match=message):
        WorkerConfig(queues=queues, concurrency=concurrency, shares=given).validate()


@pytest.mark.parametrize("text", ["emails", "emails=", "=3", "emails=-1", "emails=x"])
def test_a_share_is_queue_equals_handlers(text):
    with pytest.raises(InvalidInput):
        shares.parse(text)
    assert shares.parse(" emails = 8 ") == ("emails", 8)


def test_a_full_lane_leaves_room_in_the_others():
    lanes = shares.plan(["flood", "other"], 3, {"flood": 2})
    table = InFlightTable(3, batch=10, prefetch=10, ack_batch=100, lanes=lanes)
    assert table.slots == 3 and table.lane_prefetch == [7, 4]
    assert table.flow.capacities == {"flood": 2, "other": 1}  # a limited queue holds at most its lane's slots
    flood_room, flood_start = table.lane_room("flood")
    assert (flood_room, flood_start) == (9, 2)  # its two handlers and its part of the prefetch
    table.lane_claimed[0] = table.claimed_total = 9  # claimed, none started: over the lane's low water
    assert table.lane_room("flood") == (0, 0)
    assert table.lane_room("other") == (5, 1)
    assert table.want() == 5


def test_a_flood_in_one_queue_does_not_take_the_other_queues_handlers(db):
    """Three handlers, two of them the flood's: while every flood task blocks, the other queue's
    task still starts (without the share, three flood tasks would hold all three handlers)."""
    db.client.enqueue_many("flood", [b"f"] * 40)
    lock = threading.Lock()
    running = {"flood": 0, "other": 0}
    peak = {"flood": 0, "other": 0}
    two_flooding = threading.Event()
    other_started = threading.Event()
    release = threading.Event()

    def handler(task) -> None:
        with lock:
            running[task.queue] += 1
            peak[task.queue] = max(peak[task.queue], running[task.queue])
            if running["flood"] >= 2:
                two_flooding.set()
        if task.queue == "other":
            other_started.set()
        else:
            release.wait(WAIT)
        with lock:
            running[task.queue] -= 1

    worker = db.client.worker(["flood", "other"], handler, concurrency=3, shares={"flood": 2}, batch=10)
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    try:
        assert two_flooding.wait(WAIT)
        db.client.enqueue("other", b"o")
        assert other_started.wait(WAIT), "the other queue's task never started"
        assert peak["flood"] == 2  # the flood never had more than its share
    finally:
        release.set()
        worker.stop()
        thread.join(WAIT)
    assert not thread.is_alive()
    assert peak["flood"] == 2


def test_an_async_worker_keeps_to_the_shares_too(db):
    import asyncio

    db.client.enqueue_many("flood", [b"f"] * 20)
    started = {"flood": 0}
    two_flooding = threading.Event()
    other_started = threading.Event()
    release = threading.Event()

    async def handler(task) -> None:
        if task.queue == "other":
            other_started.set()
            return
        started["flood"] += 1  # one event loop: no lock needed
        if started["flood"] >= 2:
            two_flooding.set()
        await asyncio.get_running_loop().run_in_executor(None, release.wait, WAIT)

    worker = db.client.worker(["flood", "other"], handler, concurrency=3, shares={"flood": 2}, batch=10)
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    try:
        assert two_flooding.wait(WAIT)
        db.client.enqueue("other", b"o")
        assert other_started.wait(WAIT)
        assert started["flood"] == 2
    finally:
        release.set()
        worker.stop()
        thread.join(WAIT)


@pytest.mark.parametrize("share", ["q", "q=0", "nope=1", "q=9"])
def test_work_refuses_a_bad_share_with_exit_2(shardq_cli, share):
    result = shardq_cli(
        "work",
        "q",
        "other",
        "--handler",
        "handlers_for_test:record",
        "--concurrency",
        "4",
        "--share",
        share,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
