"""The worker whose ack releases the next step of a chain runs it itself, leased in the ack's own
statement, without a claim (shardq.worker.handoff; PostgreSQL — CockroachDB takes none). A step of
a queue the worker does not serve, or serves under a flow limit, is released for any worker's
claim; a taken step whose worker died is put back by the lease sweep; one taken while the worker
stops is handed back at once."""

from __future__ import annotations

import threading
import uuid

import pytest

from shardq.lifecycle.claim import Consumer, fenced
from shardq.lifecycle.queue_settings import QueueSettingsCache
from shardq.maintenance.reaper import Reaper
from shardq.models import RANK_BACKLOG
from shardq.models.leases import HandoffOffer
from shardq.worker.config import WorkerConfig, WorkerTotals
from shardq.worker.events import EventSink
from shardq.worker.handoff import Handoff
from shardq.worker.inflight import HAND_BACK, InFlightTable, entries_for
from shardq.worker.outcomes import Outbox
from shardq.worker.thread_executor import ThreadExecutor
from shardq.workflows import steps as workflows


def _chains(app, queue: str, chains: int, length: int, ran: list, *, is_async: bool = False) -> None:
    if is_async:

        @app.task(name="link", queue=queue)
        async def link(c: int, i: int) -> None:
            ran.append((c, i))
    else:

        @app.task(name="link", queue=queue)
        def link(c: int, i: int) -> None:
            ran.append((c, i))

    for c in range(chains):
        wf = app.workflow(f"chain-{c}")
        wf.chain(*[link.step(c=c, i=i) for i in range(length)])
        wf.enqueue()


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_the_worker_that_acks_a_chain_step_runs_the_next_one_without_claiming_it(app, db, is_async):
    ran: list[tuple[int, int]] = []
    _chains(app, "chain", 20, 5, ran, is_async=is_async)
    totals = app.work(until_empty=True)
    assert totals.acked == 100 and totals.claimed == 100 and totals.lease_lost == 0
    assert sorted(ran) == [(c, i) for c in range(20) for i in range(5)]  # each step once
    for c in range(20):
        assert [i for chain, i in ran if chain == c] == list(range(5))  # in chain order
    # Every step after a chain's first was leased by the ack of the step before it.
    assert totals.taken == (80 if db.dialect == "postgresql" else 0)


def test_a_step_of_a_queue_the_worker_does_not_serve_is_released_for_that_queues_workers(app, db):
    ran: list[str] = []

    @app.task(name="first", queue="here")
    def first() -> None:
        ran.append("first")

    @app.task(name="second", queue="elsewhere")
    def second() -> None:
        ran.append("second")

    wf = app.workflow("two-queues")
    wf.chain(first.step(), second.step())
    handle = wf.enqueue()
    totals = app.work(["here"], until_empty=True)
    assert ran == ["first"] and totals.taken == 0
    assert db.task_columns(handle.task_ids["second"], "state", "lease_token") == {"state": "ready", "lease_token": None}
    app.work(["elsewhere"], until_empty=True)
    assert ran == ["first", "second"] and handle.status().state == "succeeded"


def test_a_step_of_a_queue_with_a_concurrency_limit_is_claimed_under_the_limit_not_taken(app, db):
    ran: list[tuple[int, int]] = []
    _chains(app, "limited", 4, 3, ran)
    app.client.set_queue("limited", concurrency=2)
    totals = app.work(until_empty=True)
    assert totals.acked == 12 and totals.taken == 0
    assert sorted(ran) == [(c, i) for c in range(4) for i in range(3)]


def _take_second_step(app, db) -> tuple[HandoffOffer, dict]:
    """A chain a -> b in queue q: a claimed and acked with an offer to take; returns the offer
    (holding b) and b's row as the ack left it."""

    @app.task(name="step", queue="q")
    def step(n: int) -> None:
        pass

    wf = app.workflow("pair")
    wf.chain(step.step(n=1), step.step(n=2))
    handle = wf.enqueue()
    store = db.client.store
    (claimed,) = Consumer(store, ["q"], batch=10, lease_seconds=30.0).claim().tasks
    offer = HandoffOffer(("q",), (30.0,), room=10)
    removed = workflows.remove_and_release(
        store, lambda: store.task_ack_many([fenced(claimed)]), "succeeded", None, offer
    )
    assert removed == {claimed.key.id}
    (taken,) = offer.tasks
    assert {taken.key.id, claimed.key.id} == {uuid.UUID(i) for i in handle.task_ids.values()}
    (row,) = db.task_hold(taken.key.id)
    return offer, row


def test_the_ack_reads_the_acked_steps_and_takes_the_next_one_in_one_statement(app, db):
    if db.dialect != "postgresql":
        pytest.skip("CockroachDB takes no step: its release is claimed like any task")
    sent: list[str] = []
    db.client.store.session.before_statement = sent.append
    try:
        _take_second_step(app, db)
    finally:
        db.client.store.session.before_statement = None
    # No row of the acked step comes back (its child was taken): no statement of its own takes
    # the child, none releases it.
    assert sent[sent.index("task_ack_many") :] == ["task_ack_many", "workflow_steps_acked_take"]


def test_a_taken_step_is_leased_like_a_claimed_task_with_a_lease_record(app, db):
    if db.dialect != "postgresql":
        pytest.skip("CockroachDB takes no step: its release is claimed like any task")
    offer, row = _take_second_step(app, db)
    (taken,) = offer.tasks
    # Leased where it waited: its key is the one it was enqueued with, so the update changed no
    # indexed column (PostgreSQL writes it as a HOT update, no index entry).
    assert row == {
        "state": "leased",
        "rank": RANK_BACKLOG,
        "attempts": 1,
        "lease_token": taken.lease_token,
        "held": True,
    }
    assert taken.attempt == 1 and taken.key.rank == RANK_BACKLOG
    records = db.lease_records(taken.lease_token)
    assert records == [{"bucket": taken.key.bucket, "queue": "q", "ids": [taken.key.id]}]


def test_a_step_taken_by_a_worker_that_died_is_put_back_by_the_lease_sweep_and_runs(app, db):
    if db.dialect != "postgresql":
        pytest.skip("CockroachDB takes no step: its release is claimed like any task")
    offer, _row = _take_second_step(app, db)
    (taken,) = offer.tasks
    # The worker died before it ran the step: its lease runs out.
    db.expire_lease(taken.key.id, taken.lease_token)
    store = db.client.store
    Reaper(store).reap(range(store.layout().visit_count))
    row = db.task_columns(taken.key.id, "state", "rank", "lease_token")
    assert row is not None
    assert row["state"] in ("ready", "scheduled") and row["rank"] != RANK_BACKLOG and row["lease_token"] is None
    db.make_due(taken.key.id)  # its retry is due now
    totals = app.work(until_empty=True)
    assert totals.acked == 1
    assert db.count_tasks() == 0


class _Stopped:
    """An executor that no longer takes tasks: the worker is stopping."""

    def submit_taken(self, entries) -> bool:
        return False


def test_a_step_taken_while_the_worker_stops_is_handed_back_at_once_with_its_attempt(app, db):
    if db.dialect != "postgresql":
        pytest.skip("CockroachDB takes no step: its release is claimed like any task")
    offer, _row = _take_second_step(app, db)
    (taken,) = offer.tasks
    config = WorkerConfig(queues=("q",))
    table = InFlightTable(4, batch=10, prefetch=4, ack_batch=10)
    handoff = Handoff(config, table, _Stopped(), EventSink(None, None), WorkerTotals())  # type: ignore[arg-type]
    store = db.client.store
    handoff.hand_over(store, QueueSettingsCache(store, ["q"]), offer)
    assert not table.entries and table.taken_total == 0 and handoff.totals.taken == 0
    row = db.task_columns(taken.key.id, "state", "rank", "attempts", "lease_token")
    assert row is not None
    # Ready where claims find it: handed back from the backlog rank it was taken at.
    assert row == {"state": "ready", "rank": taken.priority, "attempts": 0, "lease_token": None}
    assert handoff.offer(QueueSettingsCache(store, ["q"]), stopping=True, settling=0) is None
    assert app.work(until_empty=True).acked == 1


def test_an_executor_refuses_taken_tasks_once_it_handed_back_what_had_not_started():
    table = InFlightTable(1, batch=1, prefetch=0, ack_batch=1)
    outbox = Outbox()
    executor = ThreadExecutor(
        lambda task: None, table, outbox, EventSink(None, None), WorkerTotals(), threading.Event(), lambda *args: None
    )
    entries, _claims = entries_for([_claimed()], deadline=0.0)
    assert executor.submit_taken(entries)
    executor.hand_back_unstarted()  # the stop: queued tasks go back, and no more are taken
    assert [o.kind for o in outbox.outcomes] == [HAND_BACK]
    assert not executor.submit_taken(entries_for([_claimed()], deadline=0.0)[0])


def test_an_ack_may_take_up_to_the_leases_a_worker_holds_less_those_it_keeps():
    table = InFlightTable(2, batch=10, prefetch=4, ack_batch=10)
    assert table.handoff_room(settling=0) == 16  # slots + prefetch + ack batch
    table.add(entries_for([_claimed() for _ in range(6)], deadline=0.0)[0])
    assert table.handoff_room(settling=0) == 10
    assert table.handoff_room(settling=6) == 16  # the six being acked leave
    table.add(entries_for([_claimed() for _ in range(20)], deadline=0.0)[0])
    assert table.handoff_room(settling=0) == 0


def _claimed():
    import datetime as dt

    from shardq.models import ClaimedTask, TaskKey

    now = dt.datetime.now(dt.UTC)
    return ClaimedTask(TaskKey(0, "q", 0, now, uuid.uuid4()), 1, 3, b"", uuid.uuid4(), now, now)


def test_a_taken_step_counts_as_leased_in_the_stats_not_as_ready_nor_backlog(app, db):
    if db.dialect != "postgresql":
        pytest.skip("CockroachDB takes no step: its release is claimed like any task")
    _take_second_step(app, db)
    db.make_task("q")  # one ready task beside it
    q = db.client.stats().queues["q"]
    # The taken step is leased at the backlog rank: it is counted once, as leased.
    assert (q.ready, q.leased, q.backlog, q.waiting) == (1, 1, 0, 0)
