"""Flow control (shardq.lifecycle.flow): a queue's global concurrency limit and rate limit, enforced in the
claim; slots follow leases (kept by renewals, freed on settle, back by themselves after a crash);
a queue without a limit sends no flow statement; settings refuse bad limits with nothing written."""

from __future__ import annotations

import threading
import time

import pytest

from shardq.errors import InvalidInput
from shardq.lifecycle.claim import Consumer
from shardq.lifecycle.flow import FlowSlots
from shardq.models import NewTask
from shardq.sessions.store import TaskStore


class Overlap:
    """Counts handlers running at once (in this process)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.peak = 0
        self.starts: list[float] = []

    def __call__(self, seconds: float):
        def handler(task) -> None:
            with self.lock:
                self.now += 1
                self.peak = max(self.peak, self.now)
                self.starts.append(time.monotonic())
            time.sleep(seconds)
            with self.lock:
                self.now -= 1

        return handler


def work(db, handler, *, concurrency: int, **options):
    worker = db.client.worker(["q"], handler, concurrency=concurrency, until_empty=True, **options)
    return worker.run(install_signal_handlers=False)


def test_a_queue_limited_to_three_runs_three_at_once_in_a_worker_of_eight(db):
    db.client.set_queue("q", concurrency=3)
    db.client.enqueue_many("q", [b"x"] * 24)
    overlap = Overlap()
    totals = work(db, overlap(0.05), concurrency=8)
    assert totals.acked == 24
    assert overlap.peak == 3
    assert db.client.store.flow_usage() == {"q": (0, 3)}  # every slot given back when it stopped


def test_two_workers_share_the_limit(db):
    db.client.set_queue("q", concurrency=2)
    db.client.enqueue_many("q", [b"x"] * 20)
    overlap = Overlap()
    threads = [threading.Thread(target=work, args=(db, overlap(0.05)), kwargs={"concurrency": 4}) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlap.peak == 2
    assert db.client.stats().queues["q"].ready == 0


def other_consumer(db, queues=("q",)) -> Consumer:
    """A consumer with its own session and its own slots: another worker."""
    return Consumer(TaskStore(db.client.new_session()), list(queues), batch=10)


def test_a_claim_never_takes_more_tasks_than_free_slots(db):
    db.client.set_queue("q", concurrency=3)
    db.client.enqueue_many("q", [b"x"] * 10)
    mine, theirs = Consumer(db.store, ["q"], batch=10), other_consumer(db)
    first = mine.claim(start_room=10)
    assert len(first.tasks) == 3 and {t.flow_slot for t in first.tasks} == {0, 1, 2}
    refused = theirs.claim(start_room=10)
    assert refused.tasks == [] and refused.throttled == {"q": None} and not refused.round_empty
    assert db.store.flow_usage() == {"q": (3, 3)}
    for task in first.tasks[:2]:
        mine.flow_slots.finished(task)  # handlers returned: two of its slots are idle again
    sent: list[str] = []
    db.store.session.before_statement = sent.append
    try:
        again = mine.claim(start_room=2)
    finally:
        db.store.session.before_statement = None
    # Its own idle slots serve: no slot is taken from the table (the promote the first claim owed
    # may come first).
    claims = {"task_claim_round" if len(db.store.claim_groups(db.layout.visit_count, 0)) == 1 else "task_claim_batch"}
    assert len(again.tasks) == 2 and set(sent) - {"task_promote_due_round", "task_promote_due"} == claims
    assert theirs.claim(start_room=10).throttled == {"q": None}


def test_a_claim_asks_only_for_what_it_can_start(db):
    db.client.set_queue("q", concurrency=5)
    db.client.enqueue_many("q", [b"x"] * 10)
    consumer = Consumer(db.store, ["q"], batch=10)
    assert len(consumer.claim(start_room=1).tasks) == 1
    assert db.store.flow_usage() == {"q": (1, 5)}  # one slot taken, four left for other workers


def test_idle_slots_are_given_back_when_a_round_finds_nothing(db):
    db.client.set_queue("q", concurrency=4)
    db.client.enqueue_many("q", [b"x"] * 2)
    consumer = Consumer(db.store, ["q"], batch=10)
    tasks = consumer.claim(start_room=4).tasks
    assert len(tasks) == 2 and db.store.flow_usage() == {"q": (4, 4)}  # took 4, two idle
    for task in tasks:
        consumer.flow_slots.finished(task)
    assert consumer.claim(start_room=4).round_empty
    assert db.store.flow_usage() == {"q": (0, 4)}


def saturating_consumer(db, handlers: int) -> Consumer:
    """A consumer whose worker has ``handlers`` handlers (its slot pool's capacity)."""
    return Consumer(db.store, ["q"], batch=10, flow_slots=FlowSlots(capacity=handlers))


def test_a_worker_holding_a_slot_per_handler_claims_ahead(db):
    db.client.set_queue("q", concurrency=2)
    db.client.enqueue_many("q", [b"x"] * 10)
    consumer = saturating_consumer(db, handlers=2)
    first = consumer.claim(start_room=2).tasks
    assert {t.flow_slot for t in first} == {0, 1}
    ahead = consumer.claim(start_room=0).tasks  # both handlers busy: claimed ahead all the same
    assert len(ahead) == 8 and all(t.flow_slot is None for t in ahead)
    assert db.store.flow_usage() == {"q": (2, 2)}  # no slot more than before
    slots = consumer.flow_slots
    consumer.flow_slots.finished(first[0])
    assert slots.seat(ahead[0])  # a handler returned: the next task takes its slot
    assert not slots.seat(ahead[1])  # no idle slot: it must not start (the worker hands it back)
    slots.finished(ahead[1])  # handed back unstarted
    pool = slots.pools["q"]
    assert pool.held == 2 and pool.unseated == {t.key.id for t in ahead[2:]}


def test_a_worker_the_limit_binds_claims_only_what_starts_at_once(db):
    db.client.set_queue("q", concurrency=2)
    db.client.enqueue_many("q", [b"x"] * 10)
    consumer = saturating_consumer(db, handlers=4)
    assert len(consumer.claim(start_room=4).tasks) == 2
    again = consumer.claim(start_room=2)
    assert again.tasks == [] and again.throttled == {"q": None}


def test_idle_slots_owed_to_tasks_claimed_ahead_are_kept_when_a_round_finds_nothing(db):
    db.client.set_queue("q", concurrency=2)
    db.client.enqueue_many("q", [b"x"] * 3)
    consumer = saturating_consumer(db, handlers=2)
    first = consumer.claim(start_room=2).tasks
    [ahead] = consumer.claim(start_room=0).tasks
    for task in first:
        consumer.flow_slots.finished(task)
    assert consumer.claim(start_room=2).round_empty
    assert db.store.flow_usage() == {"q": (1, 2)}  # one given back, one kept for the task claimed ahead
    assert consumer.flow_slots.seat(ahead)


def test_a_worker_whose_handlers_match_the_limit_claims_as_if_unlimited(db):
    db.client.set_queue("q", concurrency=4)
    db.client.enqueue_many("q", [b"x"] * 400)
    overlap = Overlap()
    totals = work(db, overlap(0.0005), concurrency=4, batch=100)
    assert totals.acked == 400 and overlap.peak == 4
    # Four tasks per claim (no claiming ahead) would take at least 100 claim statements.
    assert totals.claim_statements < 40
    assert db.client.store.flow_usage() == {"q": (0, 4)}


def test_a_worker_claiming_ahead_and_one_the_limit_binds_share_the_limit(db):
    db.client.set_queue("q", concurrency=6)
    db.client.enqueue_many("q", [b"x"] * 80)
    overlap = Overlap()
    threads = [
        threading.Thread(target=work, args=(db, overlap(0.01)), kwargs={"concurrency": 4, "batch": 5}) for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Whichever holds 4 slots claims ahead, the other holds at most 2 and claims only what starts.
    # (How many ran at once depends on who claimed ahead of whom, as without a limit.)
    assert overlap.peak <= 6
    assert db.client.stats().queues["q"].ready == 0


def test_a_thread_replacing_an_abandoned_one_waits_for_a_slot_instead_of_handing_tasks_back(db):
    # Limit 2, 2 handlers: the worker holds both slots and claims ahead. The first task outlives
    # its timeout; its thread is abandoned but keeps its slot until it ends, and the replacement
    # thread makes 2 threads for 1 slot. It waits for the slot rather than hand back every task.
    db.client.set_queue("q", concurrency=2)
    db.client.enqueue_many("q", [b"stuck"] + [b"x"] * 30)
    overlap = Overlap()
    stuck, quick = overlap(1.0), overlap(0.02)

    def handler(task) -> None:
        (stuck if task.payload == b"stuck" and task.attempt == 1 else quick)(task)

    totals = work(db, handler, concurrency=2, timeout=0.2)
    assert totals.timeouts == 1 and totals.acked >= 30
    assert overlap.peak <= 2  # the abandoned handler counted until it really returned
    assert totals.released == 0


def test_slots_of_a_dead_worker_come_back_when_they_expire(db):
    db.client.set_queue("q", concurrency=2, lease_seconds=1)
    db.client.enqueue_many("q", [b"x"] * 4)
    held = Consumer(db.store, ["q"], batch=10).claim(start_room=10).tasks  # then "dies": never renews
    assert len(held) == 2
    other = other_consumer(db)
    assert other.claim(start_room=10).throttled == {"q": None}
    expiry = max(db.slot_free_ats())
    while db.server_clock_at_or_before(expiry):
        time.sleep(0.05)  # the server's clock decides when the slots are free
    retaken = other.claim(start_room=10).tasks
    assert len(retaken) == 2  # the expired slots, without a reaper or any clean-up


def test_a_task_whose_slot_went_to_another_worker_is_marked_lost(db):
    db.client.set_queue("q", concurrency=1, lease_seconds=1)
    db.client.enqueue_many("q", [b"x"])
    consumer = Consumer(db.store, ["q"], batch=10)
    [task] = consumer.claim(start_room=10).tasks
    db.take_every_slot()  # the slot expired and was taken
    consumer.flow_slots.pools["q"].renew_at = 0.0  # renewal due now
    consumer.flow_slots.renew_due(db.store)
    assert consumer.flow_slots.lost(task) and consumer.flow_slots.pools["q"].held == 0


def test_a_renewed_lease_keeps_its_slot(db):
    db.client.set_queue("q", concurrency=1, lease_seconds=1)
    db.client.enqueue_many("q", [b"long", b"short"])
    overlap = Overlap()
    slow, fast = overlap(2.5), overlap(0.01)

    def handler(task) -> None:
        (slow if task.payload == b"long" else fast)(task)

    threads = [
        threading.Thread(target=work, args=(db, handler), kwargs={"concurrency": 2, "heartbeat": True})
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlap.peak == 1  # 2.5 s on a 1 s lease: renewed twice, never given up


def test_a_rate_limit_spaces_starts(db):
    db.client.set_queue("q", rate=20, burst=5)
    db.client.enqueue_many("q", [b"x"] * 45)
    overlap = Overlap()
    started = time.monotonic()
    totals = work(db, overlap(0), concurrency=8)
    elapsed = time.monotonic() - started
    assert totals.acked == 45
    # 5 at once, then 20 a second: 40 more take 2 s; no second holds more than 20 + 5.
    assert elapsed >= 1.9
    starts = sorted(overlap.starts)
    assert max(sum(1 for s in starts if t <= s < t + 1.0) for t in starts) <= 25


def test_refused_claims_and_slots_in_use_are_in_stats(db):
    db.client.set_queue("q", rate=10, burst=1, concurrency=2)
    db.client.enqueue_many("q", [b"x"] * 5)
    totals = work(db, lambda task: None, concurrency=4, stats_interval=0.1)
    assert totals.acked == 5 and totals.throttled > 0
    stats = db.client.stats().queues["q"]
    assert stats.activity.throttled == totals.throttled
    assert (stats.slots_in_use, stats.concurrency_limit) == (0, 2)


def test_a_queue_without_limits_sends_no_flow_statement(db):
    db.client.enqueue_many("q", [b"x"] * 50)
    sent: list[str] = []
    db.store.session.before_statement = sent.append
    try:
        Consumer(db.store, ["q"], batch=10).claim(start_room=10)
    finally:
        db.store.session.before_statement = None
    assert sent and not [name for name in sent if name.startswith("flow_")]


def test_removing_a_limit_drops_its_slots_and_bucket(db):
    db.client.set_queue("q", concurrency=3, rate=5)
    assert db.store.flow_usage() == {"q": (0, 3)}
    settings = db.client.set_queue("q", concurrency=0, rate=0)
    assert settings.concurrency_limit is None and settings.rate_limit is None
    assert db.store.flow_usage() == {}
    assert db.count_rate_tokens() == 0


def test_lowering_a_limit_drops_the_slots_above_it(db):
    db.client.set_queue("q", concurrency=5)
    db.client.set_queue("q", concurrency=2)
    assert db.store.flow_usage() == {"q": (0, 2)}


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"concurrency": -1}, "concurrency limit must be a whole number >= 0"),
        ({"concurrency": 1.5}, "concurrency limit must be a whole number >= 0"),
        ({"rate": -3}, "rate must be a whole number >= 0"),
        ({"rate": 10, "burst": 0}, "burst must be a positive whole number"),
        ({"burst": 5}, "a burst needs a rate"),
    ],
)
def test_bad_limits_are_refused_and_nothing_is_written(db, changes, message):
    with pytest.raises(InvalidInput, match=message):
        db.client.set_queue("q", **changes)
    assert db.client.queue_settings("q") is None  # not even the queue was created


def test_limits_on_a_queue_that_does_not_exist_yet_apply_when_it_appears(db):
    db.client.set_queue("later", concurrency=1)
    db.client.enqueue_many("later", [NewTask(b"x"), NewTask(b"y")])
    consumer = Consumer(db.store, ["later"], batch=10)
    assert len(consumer.claim(start_room=10).tasks) == 1


@pytest.mark.parametrize(
    ("limit", "handlers", "tasks"),
    [(2, 8, 12), (3, 3, 60)],
    ids=["the limit binds the worker", "the worker claims ahead"],
)
def test_an_async_handler_keeps_to_the_limit_too(db, limit, handlers, tasks):
    import asyncio

    db.client.set_queue("q", concurrency=limit)
    db.client.enqueue_many("q", [b"x"] * tasks)
    running = peak = 0

    async def handler(task) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1

    totals = work(db, handler, concurrency=handlers)
    assert totals.acked == tasks and peak == limit
    assert db.client.store.flow_usage() == {"q": (0, limit)}


def test_a_worker_on_a_limited_and_an_unlimited_queue_limits_only_the_first(db):
    db.client.set_queue("limited", concurrency=1)
    db.client.enqueue_many("limited", [b"x"] * 6)
    db.client.enqueue_many("free", [b"y"] * 6)
    overlap = {"limited": Overlap(), "free": Overlap()}
    handlers = {name: o(0.05) for name, o in overlap.items()}

    def handler(task) -> None:
        handlers[task.queue](task)

    worker = db.client.worker(["limited", "free"], handler, concurrency=6, until_empty=True)
    totals = worker.run(install_signal_handlers=False)
    assert totals.acked == 12
    assert overlap["limited"].peak == 1 and overlap["free"].peak > 1
