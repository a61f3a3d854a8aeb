"""The wake-up path's own economies (docs/latency.md): the insert carries the wake-up, a round
that took every ready task says so, and a round answering a wake-up that finds nothing does not
re-read what was read moments ago."""

from __future__ import annotations

import threading

from shardq.lifecycle.claim import Consumer
from shardq.lifecycle.enqueue import Producer
from shardq.lifecycle.notify import Listener, Notifier
from shardq.sessions.session import Session
from shardq.sessions.store import TaskStore
from tests.support.factories import wake_up_refused_once
from tests.support.probes import count_tasks_on


def _statements(store: TaskStore) -> list[str]:
    names: list[str] = []
    store.session.before_statement = names.append
    return names


def test_an_enqueue_carries_its_wake_up_in_its_own_statement(pg_db):
    listening = TaskStore(Session(pg_db.dsn))
    listener = Listener(listening, ["q"])
    assert listener.start()
    producer = Producer(pg_db.store, notifier=Notifier(0.0))
    names = _statements(pg_db.store)
    producer.enqueue("q", b"now")
    assert names[0] == "task_insert_many_fresh" and "queue_notify" not in names  # no statement of its own
    assert listener.wait(30, threading.Event()) is True
    listening.session.close()


def test_an_enqueue_whose_wake_up_the_server_refuses_still_enqueues_its_tasks(pg_db):
    # PostgreSQL refuses a NOTIFY at commit once its notification queue is full (a listener that
    # stopped reading): the tasks must go in all the same, without the wake-up.
    producer = Producer(pg_db.store, notifier=Notifier(0.0))
    with wake_up_refused_once(pg_db.store.session, "task_insert_many_fresh") as calls:
        result = producer.enqueue("q", b"now")
    assert len(calls) == 2 and len(result.enqueued_ids) == 1
    assert pg_db.count_tasks() == 1


def test_a_round_that_took_every_ready_task_says_it_drained_the_queue(pg_db):
    for _ in range(3):
        pg_db.make_task()
    consumer = Consumer(pg_db.store, ["q"], batch=10)
    found = consumer.claim()
    assert len(found.tasks) == 3 and found.drained
    for _ in range(3):
        pg_db.make_task()
    found = Consumer(pg_db.store, ["q"], batch=2).claim()
    assert len(found.tasks) == 2 and not found.drained  # it took what it asked for: there may be more


def test_a_round_answering_a_wake_up_that_finds_nothing_does_not_read_layout_and_settings_again(pg_db):
    consumer = Consumer(pg_db.store, ["q"])
    assert consumer.claim().round_empty  # a polled round: reads both (as before)
    names = _statements(pg_db.store)
    found = consumer.claim(woken=True)
    assert found.round_empty and found.tasks == []
    assert "layout_get" not in names and "shard_layout_get" not in names and "queue_list" not in names
    names.clear()
    assert consumer.claim().round_empty  # polled again: it reads them
    assert "queue_list" in names


def test_acks_of_a_round_claim_over_several_buckets_commit_together(pg_db):
    # A round claim leases a few tasks in each of many buckets (one claim per bucket); committing
    # each bucket's ack on its own cost a WAL flush per bucket, close to one per task.
    import psycopg

    from shardq.models.leases import WholeClaim

    for bucket in (0, 1, 2):
        pg_db.make_task(bucket=bucket)
    tasks = Consumer(pg_db.store, ["q"]).claim().tasks
    assert len({t.key.bucket for t in tasks}) == 3
    claims = [
        WholeClaim(
            t.key.bucket,
            t.queue,
            (t.key.rank, t.key.exec_time, t.key.id),
            (t.key.rank, t.key.exec_time, t.key.id),
            t.lease_token,
            [t.key],
        )
        for t in tasks
    ]
    seen_from_outside: list[int] = []
    with psycopg.connect(pg_db.dsn.conninfo, autocommit=True) as other:

        def look(name: str) -> None:
            if name == "task_ack_claim":
                seen_from_outside.append(count_tasks_on(other))

        pg_db.store.session.before_statement = look
        assert pg_db.store.task_ack_claims(claims) == set()
        pg_db.store.session.before_statement = None
        assert count_tasks_on(other) == 0
    assert seen_from_outside == [3, 3, 3]  # no bucket's ack committed before the others ran
