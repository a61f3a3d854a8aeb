"""The 40001 retry and 40003 handling of shardq.sessions.session, exercised on PostgreSQL by injecting the errors
CockroachDB raises (and by a real serialization failure). CockroachDB's own injection
(``inject_retry_errors_enabled``) is used in test_cockroach.py."""

from __future__ import annotations

import datetime as dt
import random

import psycopg
import pytest
from psycopg import errors as pgerrors

from shardq.engine.base import RetryPolicy
from shardq.errors import AmbiguousResult, SerializationConflict
from shardq.lifecycle.claim import Consumer
from shardq.maintenance.reaper import Reaper
from shardq.sessions.rules import retry_pause
from shardq.sessions.session import Session
from shardq.sessions.store import TaskStore
from tests.support.factories import fenced, utcnow


class Injector:
    """A ``before_statement`` hook: raises ``error`` for the first ``times`` runs of ``statement``
    (every run when ``times`` is None), after calling ``first`` once (to commit the work a lost
    attempt would have done)."""

    def __init__(self, statement: str, error: type[psycopg.Error], times: int | None = 1, first=None) -> None:
        self.statement, self.error, self.times, self.first = statement, error, times, first
        self.calls = 0

    def __call__(self, name: str) -> None:
        if name != self.statement:
            return
        self.calls += 1
        if self.calls == 1 and self.first is not None:
            self.first()
        if self.times is None or self.calls <= self.times:
            raise self.error(f"injected by the test ({self.error.__name__})")


def hooked_store(db, injector: Injector, *, max_retries: int = 10) -> TaskStore:
    session = Session(db.dsn, max_retries=max_retries)
    session.before_statement = injector
    return TaskStore(session)


def test_a_claim_hit_by_serialization_failures_is_resent_and_leases_each_task_once(pg_db):
    task = pg_db.make_task()
    injector = Injector("task_claim_batch", pgerrors.SerializationFailure, times=3)
    store = hooked_store(pg_db, injector)
    claimed = store.task_claim_batch(task.key.bucket, "q", 10, 30.0)
    assert [c.id for c in claimed] == [task.id]
    assert injector.calls == 4
    assert pg_db.task_row(task.id)["attempts"] == 1


def test_serialization_failures_are_retried_at_most_max_retries_times(pg_db):
    task = pg_db.make_task()
    injector = Injector("task_claim_batch", pgerrors.SerializationFailure, times=None)
    store = hooked_store(pg_db, injector, max_retries=3)
    with pytest.raises(SerializationConflict):
        store.task_claim_batch(task.key.bucket, "q", 10, 30.0)
    assert injector.calls == 4
    assert pg_db.task_row(task.id)["state"] == "ready"


def test_retry_pauses_grow_exponentially_with_full_jitter_and_a_cap():
    rng = random.Random(7)
    for attempt in range(1, 30):
        ceiling = min(RetryPolicy().cap_seconds, RetryPolicy().base_seconds * 2**attempt)
        pauses = [retry_pause(attempt, rng) for _ in range(200)]
        assert all(0.0 <= p <= ceiling for p in pauses)
        assert max(pauses) > ceiling / 2  # spread over the whole range, not a fixed delay
    assert len({round(retry_pause(3, rng), 6) for _ in range(50)}) > 40


def test_a_real_serialization_failure_reruns_the_whole_transaction_body(pg_db):
    pg_db.store.queue_ensure("q")
    other = pg_db.client.new_session()
    runs = []

    def body(session: Session) -> float:
        runs.append(1)
        session.execute_raw("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        seen = session.execute_raw("SELECT lease_seconds FROM shardq_queues WHERE name = 'q'")[0]["lease_seconds"]
        if len(runs) == 1:  # a concurrent writer commits after this transaction's snapshot
            other.execute_raw("UPDATE shardq_queues SET lease_seconds = 99 WHERE name = 'q'")
        session.execute_raw("UPDATE shardq_queues SET lease_seconds = lease_seconds + 1 WHERE name = 'q'")
        return seen

    with pg_db.client.new_session() as session:
        seen = session.transaction(body)
    assert len(runs) == 2
    assert seen == 99
    assert pg_db.store.queue_get("q").lease_seconds == 100


def test_a_serialization_failure_inside_a_transaction_reruns_the_body_not_the_statement(pg_db):
    pg_db.store.queue_ensure("q")
    injector = Injector("queue_get", pgerrors.SerializationFailure, times=1)
    runs = []
    with Session(pg_db.dsn) as session:
        session.before_statement = injector

        def body(s: Session):
            runs.append(1)
            s.execute("queue_ensure", {"queue": "r"})
            return s.fetch_one("queue_get", {"queue": "q"})

        assert session.transaction(body)["name"] == "q"
    assert len(runs) == 2 and injector.calls == 2
    assert pg_db.store.queue_get("r") is not None


def test_an_ambiguous_ack_is_resent_and_the_resend_changes_nothing(pg_db):
    task = pg_db.make_task(state="leased")
    other = TaskStore(pg_db.client.new_session())
    # The first attempt "commits" (through another session), then its answer is lost as 40003.
    injector = Injector(
        "task_ack_many", pgerrors.StatementCompletionUnknown, times=1, first=lambda: other.task_ack_many([fenced(task)])
    )
    store = hooked_store(pg_db, injector)
    assert store.task_ack_many([fenced(task)]) == set()  # counted as lease_lost by a worker
    assert injector.calls == 2
    assert pg_db.task_row(task.id) is None


def test_a_resent_retry_cannot_touch_a_lease_another_consumer_took_since(pg_db):
    task = pg_db.make_task(state="leased", lease_expires_at=utcnow() - dt.timedelta(seconds=1), attempts=1)
    thief = Consumer(TaskStore(pg_db.client.new_session()), ["q"], offset=0)

    def reap_and_reclaim() -> None:
        Reaper(TaskStore(pg_db.client.new_session())).run_once()
        pg_db.make_due(task.key.id)
        assert [t.id for t in thief.claim().tasks] == [task.id]

    injector = Injector("task_retry_many", pgerrors.StatementCompletionUnknown, times=1, first=reap_and_reclaim)
    store = hooked_store(pg_db, injector)
    assert store.task_retry_many([fenced(task)], [0.0], ["late"], require_expired=False) == set()
    row = pg_db.task_row(task.id)
    assert row["state"] == "leased" and row["lease_token"] != task.lease_token and row["last_error"] != "late"


def test_an_ambiguous_enqueue_is_not_resent(pg_db):
    injector = Injector("task_insert_many_fresh", pgerrors.StatementCompletionUnknown, times=None)
    store = hooked_store(pg_db, injector)
    from shardq.lifecycle.enqueue import Producer

    with pytest.raises(AmbiguousResult):
        Producer(store).enqueue("q", b"x")
    assert injector.calls == 1
    keyed = Injector("task_insert_many", pgerrors.StatementCompletionUnknown, times=None)
    with pytest.raises(AmbiguousResult):
        Producer(hooked_store(pg_db, keyed)).enqueue("q", b"x", dedupe_key="k")
    assert keyed.calls == 1


def test_a_consumer_moves_on_after_an_ambiguous_claim_and_the_reaper_recovers_its_tasks(pg_db):
    task = pg_db.make_task(bucket=0)
    lost = TaskStore(pg_db.client.new_session())
    # The lost claim did commit: the task is leased under a token no consumer holds. (PostgreSQL
    # claims a whole round of buckets per statement, CockroachDB one bucket.)
    first_group = lost.claim_groups(pg_db.layout.visit_count, 0)[0]
    injector = Injector(
        "task_claim_round" if len(first_group) > 1 else "task_claim_batch",
        pgerrors.StatementCompletionUnknown,
        times=1,
        first=lambda: lost.claim(first_group, "q", 10, 30.0),
    )
    consumer = Consumer(hooked_store(pg_db, injector), ["q"], offset=0)
    first = consumer.claim()
    assert first.tasks == [] and not first.round_empty
    assert pg_db.task_row(task.id)["state"] == "leased"

    pg_db.expire_lease(task.key.id)  # and every lease record
    assert Reaper(pg_db.store).run_once().retried == 1
    pg_db.make_due(task.key.id)
    again = [t for _ in range(2) for t in consumer.claim().tasks]
    assert [t.id for t in again] == [task.id]
    assert again[0].attempt == 2  # the lost claim's attempt counts


def test_a_statement_after_a_nested_transaction_is_still_never_resent_on_its_own(pg_db):
    # A transaction opened inside another (a savepoint) used to mark the session as outside any
    # transaction when it ended: the outer one's next ambiguous statement was then re-sent alone,
    # its first attempt possibly applied in a transaction that was no longer the one going on.
    task = pg_db.make_task(state="leased")
    injector = Injector("task_ack_many", pgerrors.StatementCompletionUnknown, times=1)
    store = hooked_store(pg_db, injector)

    def body(session: Session) -> set:
        session.transaction(lambda inner: inner.fetch_one("queue_get", {"queue": "q"}))
        return store.task_ack_many([fenced(task)])

    with pytest.raises(AmbiguousResult):
        store.session.transaction(body)
    assert injector.calls == 1
    assert pg_db.task_row(task.id) is not None
