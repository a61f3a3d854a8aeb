"""Producing: single and bulk enqueue, scheduling, dedupe, validation."""

from __future__ import annotations

import datetime as dt

import pytest

from shardq import InvalidInput, NewTask
from shardq.lifecycle.claim import Consumer
from tests.support.factories import utcnow


def claim_all(db, queue="q", batch=1000):
    consumer = Consumer(db.store, [queue], batch=batch, lease_seconds=30)
    claimed = []
    while True:
        found = consumer.claim()
        claimed.extend(found.tasks)
        if found.round_empty:
            return claimed


def test_enqueued_task_is_claimable_with_its_payload(db):
    result = db.client.enqueue("q", b"\x00hello\xff")
    assert result.enqueued == 1 and result.duplicates == 0
    [task] = claim_all(db)
    assert task.id == result.enqueued_ids[0]
    assert task.payload == b"\x00hello\xff"
    assert task.attempt == 1


def test_enqueue_many_inserts_every_task_in_batches(db):
    result = db.client.enqueue_many("q", [f"p{i}".encode() for i in range(2500)], batch_size=1000)
    assert result.enqueued == 2500
    assert len(set(result.enqueued_ids)) == 2500
    assert sorted(t.payload for t in claim_all(db)) == sorted(f"p{i}".encode() for i in range(2500))


def test_tasks_spread_over_every_bucket(db):
    db.client.enqueue_many("q", [b"x"] * 400)
    counts = db.store.task_count_by_bucket()
    assert set(counts) == set(range(db.layout.bucket_count))


def test_second_enqueue_with_a_live_dedupe_key_is_a_noop_that_says_so(db):
    first = db.client.enqueue("q", b"a", dedupe_key="order-1")
    second = db.client.enqueue("q", b"b", dedupe_key="order-1")
    assert first.enqueued == 1
    assert second.enqueued == 0 and second.duplicate_keys == ("order-1",)
    assert db.count() == 1


def test_dedupe_key_is_free_again_once_the_task_is_acked(db):
    from tests.support.factories import fenced

    db.client.enqueue("q", b"a", dedupe_key="k")
    [task] = claim_all(db)
    assert db.store.task_ack_many([fenced(task)])
    assert db.client.enqueue("q", b"again", dedupe_key="k").enqueued == 1


def test_dedupe_keys_are_per_queue(db):
    assert db.client.enqueue("a", b"x", dedupe_key="k").enqueued == 1
    assert db.client.enqueue("b", b"x", dedupe_key="k").enqueued == 1


def test_duplicate_keys_inside_one_batch_enqueue_once(db):
    tasks = [NewTask(b"1", dedupe_key="k"), NewTask(b"2", dedupe_key="k"), NewTask(b"3")]
    result = db.client.enqueue_many("q", tasks)
    assert result.enqueued == 2 and result.duplicate_keys == ("k",)


def test_delayed_task_is_not_claimed_before_its_time(db):
    db.client.enqueue("q", b"later", delay=3600)
    db.client.enqueue("q", b"at", run_at=utcnow() + dt.timedelta(hours=1))
    assert claim_all(db) == []
    stats = db.client.stats().queues["q"]
    assert (stats.ready, stats.scheduled) == (0, 2)


def test_task_scheduled_in_the_past_is_due_now(db):
    db.client.enqueue("q", b"past", run_at=utcnow() - dt.timedelta(minutes=5))
    assert len(claim_all(db)) == 1


def test_queue_exists_from_its_first_enqueue_with_default_settings(db):
    assert db.store.queue_get("fresh") is None
    db.client.enqueue("fresh", b"x")
    settings = db.store.queue_get("fresh")
    assert settings is not None and settings.max_attempts == 25 and settings.lease_seconds == 30


@pytest.mark.parametrize(
    "queue, payload, options",
    [
        ("", b"x", {}),
        ("has space", b"x", {}),
        ("x" * 129, b"x", {}),
        ("q;drop table shardq_tasks", b"x", {}),
        ("q", 12, {}),
        ("q", b"x" * (1024 * 1024 + 1), {}),
        ("q", b"x", {"delay": -1}),
        ("q", b"x", {"delay": float("nan")}),
        ("q", b"x", {"run_at": dt.datetime(2030, 1, 1)}),
        ("q", b"x", {"delay": 1, "run_at": utcnow()}),
        ("q", b"x", {"dedupe_key": ""}),
        ("q", b"x", {"max_attempts": 0}),
    ],
)
def test_bad_input_is_rejected_and_writes_nothing(db, queue, payload, options):
    with pytest.raises(InvalidInput):
        db.client.enqueue(queue, payload, **options)
    assert db.count() == 0


def test_one_bad_task_in_a_batch_writes_nothing(db):
    with pytest.raises(InvalidInput):
        db.client.enqueue_many("q", [b"ok", b"ok", 3.5])
    assert db.count() == 0


def test_the_enqueue_options_are_declared_once_and_newtask_carries_exactly_them():
    import dataclasses
    import typing

    from shardq.app.deferral import CALL_OPTIONS
    from shardq.models import TaskOptions

    fields = typing.get_type_hints(NewTask)
    options = typing.get_type_hints(TaskOptions)
    assert [f.name for f in dataclasses.fields(NewTask)] == ["payload", *options]  # same names, same order
    assert {name: fields[name] for name in options} == options  # same types
    assert TaskOptions.__optional_keys__ == options.keys()  # every option may be left out
    assert (*options, "queue", "connection") == CALL_OPTIONS


def test_enqueue_keeps_its_keyword_only_options_and_refuses_an_unknown_one(db):
    with pytest.raises(TypeError):
        db.client.enqueue("q", b"x", 30)  # options are keyword-only
    with pytest.raises(TypeError, match="colour"):
        db.client.enqueue("q", b"x", colour="red")
    with pytest.raises(InvalidInput):
        db.client.enqueue("q", b"x", delay=-1)
    assert db.count() == 0
    result = db.client.enqueue("q", b"x", priority=-2, dedupe_key="k", max_attempts=3)
    [task] = claim_all(db)
    assert (task.id, task.priority, task.max_attempts) == (result.enqueued_ids[0], -2, 3)
