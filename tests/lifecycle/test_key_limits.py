"""Limits per concurrency key (shardq.lifecycle.key_limits): at most N live tasks per key, for a key
or a prefix, across workers; the waiting ones start as the key's tasks leave (ack, dead letter by
settler or reaper, cancel); bad input is refused with nothing written; a queue that uses none of this
sends the statements it sent before."""

from __future__ import annotations

import datetime as dt
import threading

import pytest

from shardq.errors import InvalidInput
from shardq.lifecycle import exclusive, key_slots
from shardq.lifecycle.claim import Consumer
from shardq.lifecycle.enqueue import Producer
from shardq.maintenance.reaper import Reaper
from shardq.models import NewTask
from tests.support.cli import shardq_cli  # noqa: F401 - the fixture
from tests.support.factories import fenced, run_until_settled, utcnow

WAIT = 30.0


def drain(db, queue="q"):
    consumer = Consumer(db.store, [queue], batch=1000)
    tasks = []
    while not (found := consumer.claim()).round_empty:
        tasks += found.tasks
    return tasks


def states(db) -> dict[str, int]:
    return db.count_by_state()


def test_a_key_runs_at_most_its_limit_and_the_rest_wait(db):
    db.client.set_key_limit("q", "tenant:*", 2)
    result = db.client.enqueue_many(
        "q", [NewTask(b"a", concurrency_key="tenant:1")] * 5 + [NewTask(b"b", concurrency_key="tenant:2")]
    )
    assert result.enqueued == 6 and len(result.backlogged_ids) == 3
    claimed = drain(db)
    assert sorted(str(key_slots.key_of(t.exclusive_key)) for t in claimed) == ["tenant:1", "tenant:1", "tenant:2"]
    assert len({t.exclusive_key for t in claimed}) == 3  # each in a slot of its own
    assert states(db) == {"leased": 3, "backlog": 3}


def test_the_exact_key_wins_over_a_prefix_and_the_longest_prefix_over_a_shorter_one():
    limits = [
        key_slots.KeyLimit("*", 9),
        key_slots.KeyLimit("tenant:*", 2),
        key_slots.KeyLimit("tenant:vip*", 4),
        key_slots.KeyLimit("tenant:vip:1", 7),
    ]
    assert key_slots.resolve(limits, "tenant:vip:1") == 7
    assert key_slots.resolve(limits, "tenant:vip:2") == 4
    assert key_slots.resolve(limits, "tenant:3") == 2
    assert key_slots.resolve(limits, "other") == 9
    assert key_slots.resolve(limits[1:], "other") is None


def test_a_key_no_limit_matches_is_a_plain_task(db):
    db.client.set_key_limit("q", "tenant:*", 1)
    result = db.client.enqueue_many("q", [NewTask(b"x", concurrency_key="batch:1")] * 3)
    assert result.enqueued == 3 and not result.backlogged_ids
    assert {row["exclusive_key"] for row in db.tasks("exclusive_key")} == {None}


def test_an_ack_lets_the_next_waiting_task_of_the_key_start(db):
    db.client.set_key_limit("q", "k", 2)
    db.client.enqueue_many("q", [NewTask(b"%d" % i, concurrency_key="k", priority=i) for i in range(4)])
    first = drain(db)
    assert sorted(t.payload for t in first) == [b"0", b"1"]
    done = first[0]
    key_of = {done.key.id: ("q", done.exclusive_key or "")}
    _, promoted = exclusive.remove_and_release(
        db.store, list(key_of.values()), lambda: db.store.task_ack_many([fenced(done)]), key_of
    )
    assert len(promoted) == 1
    [next_task] = drain(db)
    assert next_task.payload == b"2" and next_task.exclusive_key == done.exclusive_key  # the freed slot


def test_a_worker_fleet_never_runs_more_than_the_limit_of_a_key(db):
    """Eight handlers, a key limited to two: once two run, the others are not claimable (they wait in
    the backlog), and every task still runs, the waiting ones as the running ones are acked."""
    db.client.set_key_limit("q", "tenant:*", 2)
    db.client.enqueue_many("q", [NewTask(b"t", concurrency_key="tenant:1")] * 6)
    lock = threading.Lock()
    running = [0]
    peak = [0]
    two_running = threading.Event()
    release = threading.Event()

    def handler(task) -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            if running[0] == 2:
                two_running.set()
        release.wait(WAIT)
        with lock:
            running[0] -= 1

    worker = db.client.worker(["q"], handler, concurrency=8)
    seen: dict[str, int] = {}

    def check() -> None:
        two_running.wait(WAIT)
        seen.update(states(db))
        release.set()

    watcher = threading.Thread(target=check)
    watcher.start()
    totals = run_until_settled(worker, 6)
    watcher.join(WAIT)
    assert seen == {"leased": 2, "backlog": 4}
    assert totals.acked == 6 and peak[0] == 2
    assert db.count() == 0


def test_a_dead_letter_by_the_reaper_releases_the_slot(db):
    db.client.set_key_limit("q", "k", 1)
    active = db.make_task(
        state="leased",
        exclusive_key=key_slots.slot_key("k", 0),
        attempts=3,
        max_attempts=3,
        lease_expires_at=utcnow() - dt.timedelta(seconds=1),
    )
    waiting = db.make_task(state="backlog", exclusive_key=key_slots.waiting_key("k"))
    assert Reaper(db.store).run_once().dead == 1
    row = db.task_row(waiting.id)
    assert row["state"] == "ready" and row["exclusive_key"] == key_slots.slot_key("k", 0)
    assert db.task_row(active.id) is None


def test_cancelling_a_running_task_of_a_key_starts_a_waiting_one(db):
    db.client.set_key_limit("q", "k", 1)
    first = db.client.enqueue("q", b"1", concurrency_key="k").enqueued_ids[0]
    second = db.client.enqueue("q", b"2", concurrency_key="k").enqueued_ids[0]
    assert db.task_row(second)["state"] == "backlog"
    assert db.client.cancel(first).promoted == 1
    assert db.task_row(second)["state"] == "ready"


def test_a_raised_limit_fills_the_new_slots_at_the_next_release(db):
    db.client.set_key_limit("q", "k", 1)
    db.client.enqueue_many("q", [NewTask(b"x", concurrency_key="k")] * 4)
    [done] = drain(db)
    db.client.set_key_limit("q", "k", 3)
    key_of = {done.key.id: ("q", done.exclusive_key or "")}
    _, promoted = exclusive.remove_and_release(
        db.store, list(key_of.values()), lambda: db.store.task_ack_many([fenced(done)]), key_of
    )
    assert len(promoted) == 3
    assert states(db) == {"ready": 3}


def test_exclusive_keys_keep_working_beside_key_limits(db):
    db.client.set_key_limit("q", "k", 2)
    db.client.enqueue_many("q", [NewTask(b"e", exclusive_key="acct")] * 2 + [NewTask(b"c", concurrency_key="k")] * 3)
    claimed = drain(db)
    assert sorted(t.payload for t in claimed) == [b"c", b"c", b"e"]
    assert states(db) == {"leased": 3, "backlog": 2}


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda c: c.set_key_limit("q", "tenant:*", 0), "positive whole number"),
        (lambda c: c.set_key_limit("q", "tenant:*", 1001), "at most 1000"),
        (lambda c: c.set_key_limit("q", "", 1), "key pattern"),
        (lambda c: c.enqueue("q", b"x", concurrency_key="k" * 1000), "longer than"),
        (lambda c: c.enqueue("q", b"x", concurrency_key="a\x1fb"), "chr"),
        (lambda c: c.enqueue("q", b"x", concurrency_key="k", exclusive_key="e"), "not both"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_written(db, call, message):
    with pytest.raises(InvalidInput, match=message):
        call(db.client)
    assert db.count() == 0 and db.client.key_limits("q") == {}


@pytest.mark.parametrize(
    "args",
    [
        ("queue", "key-limit", "q", "tenant:*", "0"),
        ("queue", "key-limit", "q", "tenant:*"),
        ("enqueue", "q", "x", "--concurrency-key", "k" * 1000),
    ],
)
def test_the_cli_refuses_bad_input_with_one_line_and_exit_2(shardq_cli, args):  # noqa: F811 - the fixture
    result = shardq_cli(*args, check=False)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_the_cli_sets_and_shows_limits(shardq_cli):  # noqa: F811 - the fixture
    shardq_cli("queue", "key-limit", "q", "tenant:*", "3")
    assert shardq_cli("queue", "key-limits", "q", "--json").stdout.strip() == '{"tenant:*": 3}'
    shardq_cli("queue", "key-limit", "q", "tenant:*", "--remove")
    assert shardq_cli("queue", "key-limits", "q", "--json").stdout.strip() == "{}"


#: What a queue that uses no flow feature sends (PostgreSQL): recorded before limits per key,
#: shares, debounce and throttle existed, and unchanged by them.
PLAIN_STATEMENTS = [
    "task_insert_many_fresh",
    "stats_add_many",  # enqueue one (the first count of a queue is written at once)
    "task_insert_many_fresh",  # enqueue many
    "layout_get",
    "queue_list",
    "task_claim_round",  # claim
    "task_ack_many",  # ack
]


def test_a_plain_queue_sends_the_statements_it_sent_before(pg_db):
    sent: list[str] = []
    producer = Producer(pg_db.store)
    pg_db.store.session.before_statement = sent.append
    try:
        producer.enqueue("q", b"one")
        producer.enqueue_many("q", [b"a", b"b"])
        tasks = Consumer(pg_db.store, ["q"], batch=10).claim().tasks
        pg_db.store.task_ack_many([fenced(t) for t in tasks])
    finally:
        pg_db.store.session.before_statement = None
    assert len(tasks) == 3
    assert sent == PLAIN_STATEMENTS


def test_two_workers_together_keep_to_the_limit_of_a_key(db):
    """The limit is the fleet's, not a worker's: two workers of four handlers each, a key limited to
    three, run at most three of its tasks at once between them."""
    db.client.set_key_limit("q", "k", 3)
    db.client.enqueue_many("q", [NewTask(b"t", concurrency_key="k")] * 9)
    lock = threading.Lock()
    running = [0]
    peak = [0]
    done = [0]
    three_running = threading.Event()
    release = threading.Event()
    all_done = threading.Event()

    def handler(task) -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            if running[0] == 3:
                three_running.set()
        release.wait(WAIT)
        with lock:
            running[0] -= 1
            done[0] += 1
            if done[0] == 9:
                all_done.set()

    workers = [db.client.worker(["q"], handler, concurrency=4) for _ in range(2)]
    threads = [threading.Thread(target=w.run, kwargs={"install_signal_handlers": False}) for w in workers]
    for thread in threads:
        thread.start()
    try:
        assert three_running.wait(WAIT)
        assert states(db) == {"leased": 3, "backlog": 6}
        release.set()
        assert all_done.wait(WAIT)
    finally:
        release.set()
        for worker in workers:
            worker.stop()
        for thread in threads:
            thread.join(WAIT)
    assert peak[0] == 3
    assert sum(w.totals.claimed for w in workers) == 9
