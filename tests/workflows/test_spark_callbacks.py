"""The callback of a Spark run against the database, without Spark (shardq.workflows.spark_callbacks): the run's
tasks are enqueued by the app and marked as the Spark writers mark them."""

from __future__ import annotations

import pytest

import shardq
from shardq.lifecycle.claim import Consumer
from shardq.sessions.store import TaskStore
from shardq.workflows import spark_callbacks as run_callbacks
from tests.support.concurrency import at_once, own_stores
from tests.support.factories import fenced, listening_store, wake_up_refused_once


def _run(app, db, run_id: str, callback, items: list[str], task) -> run_callbacks.Callback:
    """Register ``callback`` for ``run_id`` and enqueue ``items`` as the run's tasks (as the Spark
    writers write them: with the run's workflow id)."""
    found = db.session.run(run_callbacks.register_plan(run_id, callback))
    ids = [str(task.defer(label=label)) for label in items]
    db.mark_workflow(ids, found.mark)
    return found


def test_the_ack_that_leaves_no_task_of_a_complete_run_enqueues_the_callback_once(app, db):
    ran: list[str] = []

    @app.task(name="item")
    def item(label: str) -> None:
        ran.append(label)

    @app.task(name="done")
    def done() -> None:
        ran.append("done")

    callback = _run(app, db, "r1", done.step(), ["a", "b", "c", "d"], item)
    assert run_callbacks.is_run(callback.mark) and callback.state == "waiting"
    assert db.session.run(run_callbacks.complete_plan("r1")) is False  # tasks left
    counts = app.work(until_empty=True)
    assert sorted(ran[:4]) == ["a", "b", "c", "d"] and ran[4:] == ["done"]
    assert counts.acked == 5
    status = app.workflow_status(callback.workflow_id)
    assert status.state == "succeeded" and [s.state for s in status.steps] == ["succeeded"]
    # The job's end on a re-run: nothing to release any more.
    assert db.session.run(run_callbacks.complete_plan("r1")) is False
    assert db.count() == 0


def test_a_run_not_yet_complete_waits_and_its_end_releases_the_callback(app, db):
    ran: list[str] = []

    @app.task(name="item")
    def item(label: str) -> None:
        ran.append(label)

    @app.task(name="done")
    def done() -> None:
        ran.append("done")

    callback = _run(app, db, "r2", done.step(), ["a", "b"], item)
    app.work(until_empty=True)  # every task acked while chunks were still being merged
    assert ran == ["a", "b"]
    assert db.session.run(run_callbacks.get_plan("r2")).state == "waiting"
    assert db.session.run(run_callbacks.complete_plan("r2")) is True
    assert db.session.run(run_callbacks.complete_plan("r2")) is False  # once
    app.work(until_empty=True)
    assert ran == ["a", "b", "done"]
    assert app.workflow_status(callback.workflow_id).state == "succeeded"


def test_registering_again_keeps_the_first_callback(app, db):
    @app.task(name="done")
    def done() -> None: ...

    @app.task(name="other")
    def other() -> None: ...

    first = db.session.run(run_callbacks.register_plan("r3", done.step()))
    again = db.session.run(run_callbacks.register_plan("r3", other.step()))
    assert again == first and again.step == "done"
    assert db.count() == 1  # one waiting callback task


def test_a_dead_task_of_the_run_cancels_the_callback(app, db):
    ran: list[str] = []

    @app.task(name="item", max_attempts=1)
    def item(label: str) -> None:
        if label == "bad":
            raise ValueError("bad row")
        ran.append(label)

    @app.task(name="done")
    def done() -> None:
        ran.append("done")

    callback = _run(app, db, "r4", done.step(), ["a", "bad", "c"], item)
    db.session.run(run_callbacks.complete_plan("r4"))
    counts = app.work(until_empty=True)
    assert counts.dead == 1 and "done" not in ran and sorted(ran) == ["a", "c"]
    status = app.workflow_status(callback.workflow_id)
    assert status.state == "cancelled" and status.steps[0].state == "cancelled"
    assert db.count() == 0  # the callback's task went with it
    assert db.session.run(run_callbacks.complete_plan("r4")) is False


def test_a_task_outside_every_run_acks_as_before(app, db):
    @app.task(name="plain")
    def plain(label: str) -> None: ...

    plain.defer(label="x")
    assert app.work(until_empty=True).acked == 1
    assert db.count_workflows() == 0


def _ack_at_once(stores: list[TaskStore], tasks: list) -> list[BaseException]:
    """Ack each task of the run through its own store, all at once; the errors raised."""
    return at_once(
        stores,
        tasks,
        lambda store, task: run_callbacks.remove_and_settle(
            store, lambda: store.task_ack_many([fenced(task)]), {task.key.id: task.workflow_id}, "succeeded"
        ),
    )


def test_the_last_two_tasks_acked_at_once_on_two_sessions_release_the_callback_exactly_once(app, db):
    @app.task(name="item")
    def item(label: str) -> None: ...

    @app.task(name="done")
    def done() -> None: ...

    for round_ in range(8):
        run_id = f"race-{round_}"
        _run(app, db, run_id, done.step(), ["a", "b"], item)
        db.session.run(run_callbacks.complete_plan(run_id))
        tasks = Consumer(db.store, ["default"], batch=2).claim().tasks
        assert len(tasks) == 2 and all(run_callbacks.is_run(t.workflow_id) for t in tasks)
        with own_stores(db.client, len(tasks)) as stores:
            assert _ack_at_once(stores, tasks) == []
        assert db.session.run(run_callbacks.get_plan(run_id)).state == "ready"
        assert [r["state"] for r in db.tasks("state")] == ["ready"]
        db.delete_all_tasks()


def test_forgetting_an_old_run_forgets_its_callback_too(app, db):
    from shardq.spark.ledger import SparkLedger

    @app.task(name="done")
    def done() -> None: ...

    ledger = SparkLedger(db.session)
    ledger.run_register("old", "default", 2)
    db.session.run(run_callbacks.register_plan("old", done.step()))
    assert ledger.runs_expire(0) == 1
    assert db.session.run(run_callbacks.get_plan("old")) is None


@pytest.fixture
def queued_apart(pg_db):
    """An app on PostgreSQL (wake-ups) whose run tasks (``item``, queue ``items``) and callback
    (``done``, queue ``callbacks``) are served by different queues."""
    app = shardq.App(pg_db.dsn)

    @app.task(name="item", queue="items")
    def item(label: str) -> None: ...

    @app.task(name="done", queue="callbacks")
    def done() -> None: ...

    yield app, item, done
    app.close()


def test_the_ack_that_releases_a_runs_callback_wakes_the_listening_workers_of_its_queue(pg_db, queued_apart):
    app, item, done = queued_apart
    listening = listening_store(pg_db.dsn, ["callbacks"])
    try:
        _run(app, pg_db, "r-wake", done.step(), ["a", "b"], item)
        pg_db.session.run(run_callbacks.complete_plan("r-wake"))  # complete: the last ack releases
        listening.notifications(0)
        app.work(["items"], until_empty=True)
        assert "callbacks" in listening.notifications(5)  # without it, a worker's next poll
    finally:
        listening.session.close()


def test_the_job_end_that_releases_a_runs_callback_wakes_the_listening_workers_too(pg_db, queued_apart):
    app, item, done = queued_apart
    listening = listening_store(pg_db.dsn, ["callbacks"])
    try:
        _run(app, pg_db, "r-end", done.step(), ["a"], item)
        app.work(["items"], until_empty=True)  # acked before the job marked the run complete
        listening.notifications(0)
        assert pg_db.session.run(run_callbacks.complete_plan("r-end")) is True
        assert "callbacks" in listening.notifications(5)
    finally:
        listening.session.close()


def test_an_ack_whose_wake_up_the_server_refuses_still_releases_the_callback(pg_db, queued_apart):
    app, item, done = queued_apart
    callback = _run(app, pg_db, "r-refused", done.step(), ["a"], item)
    pg_db.session.run(run_callbacks.complete_plan("r-refused"))
    [task] = Consumer(pg_db.store, ["items"]).claim().tasks
    with wake_up_refused_once(pg_db.store.session, "workflow_tasks_release") as calls:
        removed = run_callbacks.remove_and_settle(
            pg_db.store, lambda: pg_db.store.task_ack_many([fenced(task)]), {task.key.id: task.workflow_id}, "succeeded"
        )
    assert removed == {task.key.id} and len(calls) == 2
    assert pg_db.session.run(run_callbacks.get_plan("r-refused")).state == "ready"
    assert app.workflow_status(callback.workflow_id).steps[0].state == "ready"
