"""Claiming, acking, retrying, extending and releasing, including fencing by lease token."""

from __future__ import annotations

import datetime as dt
import threading
import uuid

import pytest

from shardq.lifecycle.claim import Consumer
from shardq.models.leases import Fenced
from tests.support.factories import fenced, utcnow


def test_claim_leases_the_task_with_a_fresh_token_expiry_and_attempt(db):
    made = db.make_task(attempts=2)
    consumer = Consumer(db.store, ["q"], lease_seconds=60)
    [task] = consumer.claim().tasks
    row = db.task_row(made.id)
    assert row["state"] == "leased"
    assert row["attempts"] == 3 and task.attempt == 3
    assert row["lease_token"] == task.lease_token
    assert dt.timedelta(seconds=55) < row["lease_expires_at"] - utcnow() <= dt.timedelta(seconds=61)


def test_claim_takes_earliest_exec_time_first_within_a_bucket(db):
    base = utcnow() - dt.timedelta(minutes=10)
    made = [
        db.make_task(exec_time=base + dt.timedelta(seconds=i), bucket=0, payload=str(i).encode()) for i in (3, 1, 2)
    ]
    tasks = db.store.task_claim_batch(made[0].key.bucket, "q", 10, 30)
    assert [t.payload for t in tasks] == [b"1", b"2", b"3"]


def test_claim_respects_the_batch_limit(db):
    db.client.enqueue_many("q", [b"x"] * 200)
    consumer = Consumer(db.store, ["q"], batch=4)
    assert len(consumer.claim().tasks) == 4
    assert len(consumer.claim(limit=2).tasks) == 2


def test_claim_skips_leased_and_scheduled_tasks(db):
    db.make_task(state="leased")
    db.make_task(state="scheduled", exec_time=utcnow() + dt.timedelta(hours=1))
    ready = db.make_task()
    claimed = []
    consumer = Consumer(db.store, ["q"])
    while not (found := consumer.claim()).round_empty:
        claimed += found.tasks
    assert [t.id for t in claimed] == [ready.id]


def test_consumers_walk_every_bucket_round_robin_from_their_own_offset(db):
    made = {db.make_task().id for _ in range(40)}
    consumer = Consumer(db.store, ["q"], batch=1, offset=3)
    seen = []
    while not (found := consumer.claim()).round_empty:
        seen += found.tasks
    assert {t.id for t in seen} == made
    if db.dialect == "postgresql":
        first_buckets = [t.key.bucket for t in seen[: db.layout.bucket_count]]
        assert first_buckets[0] == 3 % db.layout.bucket_count
        assert len(set(first_buckets)) == db.layout.bucket_count


def test_concurrent_consumers_never_hold_the_same_task_at_once(db):
    total = 600
    db.client.enqueue_many("q", [b"x"] * total)
    holders: dict[str, int] = {}
    overlap = []
    lock = threading.Lock()
    start = threading.Barrier(6)

    def consume(index: int) -> None:
        session = db.client.new_session()
        from shardq.sessions.store import TaskStore

        store = TaskStore(session)
        consumer = Consumer(store, ["q"], batch=7)
        start.wait()
        while not (found := consumer.claim()).round_empty:
            with lock:
                for t in found.tasks:
                    if t.id in holders:
                        overlap.append(t.id)
                    holders[t.id] = index
            store.task_ack_many([fenced(t) for t in found.tasks])

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlap == []
    assert len(holders) == total
    assert db.count() == 0


def test_ack_deletes_the_task(db):
    task = db.make_task(state="leased")
    assert db.store.task_ack_many([fenced(task)]) == {task.key.id}
    assert db.task_row(task.id) is None


def test_ack_with_a_stale_token_changes_nothing(db):
    task = db.make_task(state="leased")
    stale = Fenced(task.key, uuid.uuid4())
    assert db.store.task_ack_many([stale]) == set()
    assert db.task_row(task.id)["state"] == "leased"


def test_an_ack_of_several_tasks_names_only_those_whose_lease_it_still_held(db):
    held = [db.make_task(state="leased") for _ in range(3)]
    lost = db.make_task(state="leased")
    done = db.store.task_ack_many([*(fenced(t) for t in held), Fenced(lost.key, uuid.uuid4())])
    assert done == {t.key.id for t in held}
    assert [db.task_row(t.id) for t in held] == [None, None, None] and db.task_row(lost.id)["state"] == "leased"


def test_retry_with_a_stale_token_changes_nothing(db):
    task = db.make_task(state="leased")
    assert db.store.task_retry_many([Fenced(task.key, uuid.uuid4())], [0.0], ["e"], require_expired=False) == set()
    assert db.task_row(task.id)["state"] == "leased"


def test_extend_with_a_stale_token_changes_nothing(db):
    task = db.make_task(state="leased", lease_expires_at=utcnow() + dt.timedelta(seconds=5))
    before = db.task_row(task.id)["lease_expires_at"]
    assert db.store.task_extend_many([Fenced(task.key, uuid.uuid4())], 600) == {}
    assert db.task_row(task.id)["lease_expires_at"] == before


def test_extend_renews_the_lease(db):
    task = db.make_task(state="leased", lease_expires_at=utcnow() + dt.timedelta(seconds=5))
    renewed = db.store.task_extend_many([fenced(task)], 600)
    assert renewed[task.key.id] - utcnow() > dt.timedelta(seconds=590)


def test_retry_puts_the_task_back_later_with_its_error(db):
    task = db.make_task(state="leased", attempts=1)
    assert db.store.task_retry_many([fenced(task)], [120.0], ["boom"], require_expired=False) == {task.key.id}
    row = db.task_row(task.id)
    assert row["state"] == "scheduled" and row["last_error"] == "boom" and row["lease_token"] is None
    assert dt.timedelta(seconds=110) < row["exec_time"] - utcnow() <= dt.timedelta(seconds=121)
    assert row["attempts"] == 1


def test_bury_moves_the_task_to_the_dead_letters_with_its_error(db):
    task = db.make_task(state="leased", attempts=3, payload=b"body")
    assert db.store.task_bury_many([fenced(task)], ["fatal"], require_expired=False) == {task.key.id}
    assert db.task_row(task.id) is None
    dead = db.dead_row(task.id)
    assert dead["last_error"] == "fatal" and dead["attempts"] == 3 and bytes(dead["payload"]) == b"body"


def test_release_hands_the_task_back_and_refunds_the_attempt(db):
    db.make_task(attempts=0)
    [task] = Consumer(db.store, ["q"]).claim().tasks
    assert db.store.task_release_many([fenced(task)]) == {task.key.id}
    row = db.task_row(task.id)
    assert row["state"] == "ready" and row["attempts"] == 0 and row["lease_token"] is None


def test_paused_queue_is_not_claimed(db):
    db.make_task()
    db.pause_dequeue("q")
    found = Consumer(db.store, ["q"]).claim()
    assert found.tasks == [] and found.round_empty


@pytest.mark.parametrize(
    "bad", [{"batch": 0}, {"batch": -1}, {"lease_seconds": 0}, {"lease_seconds": -5}, {"lease_seconds": 0.99}]
)
def test_consumer_rejects_non_positive_batch_and_a_lease_under_a_second(db, bad):
    from shardq import InvalidInput

    with pytest.raises(InvalidInput):
        Consumer(db.store, ["q"], **bad)


def test_a_queue_lease_under_a_second_written_in_sql_is_used_as_one_second(db):
    db.client.store.queue_ensure("q")
    db.set_lease_seconds("q", 0.01)  # passes the table's CHECK
    db.make_task()
    consumer = Consumer(db.store, ["q"])
    assert consumer.lease_for("q") == 1.0
    before = db.server_now()
    [task] = consumer.claim().tasks
    after = db.server_now()
    # The claim's server clock lies between the two readings.
    assert before + dt.timedelta(seconds=1) <= task.lease_expires_at <= after + dt.timedelta(seconds=1)
