"""Workflows against the database: enqueue, release in the ack, failure, cancel, status
(shardq.workflows.steps)."""

from __future__ import annotations

import pytest

from shardq.admin import actions as admin
from shardq.errors import InvalidInput
from shardq.lifecycle.claim import Consumer
from shardq.models.tasks import STEP_STATES
from shardq.sessions.store import TaskStore
from shardq.workflows import steps as workflows
from tests.support.concurrency import at_once, own_stores
from tests.support.factories import fenced


def _task_states(db, handle) -> dict[str, str]:
    by_id = db.task_states_by_id()
    return {name: by_id.get(task_id, "gone") for name, task_id in handle.task_ids.items()}


def test_a_step_whose_task_a_worker_holds_is_shown_running(app, db):
    @app.task(name="step")
    def step(label: str) -> None:
        pass

    wf = app.workflow("held")
    wf.chain(step.step(label="a"), step.step(label="b"))
    wf.add(step.step(label="c"), name="root")
    handle = wf.enqueue()
    claimed = Consumer(db.store, ["default"], batch=1).claim().tasks
    held = {t.id for t in claimed}
    assert len(held) == 1
    states = {s.name: s.state for s in handle.status().steps}
    running = [name for name, task_id in handle.task_ids.items() if str(task_id) in held]
    assert states[running[0]] == "running" and states["step-2"] == "waiting"
    assert sorted(states.values()) == ["ready", "running", "waiting"]
    assert handle.status().state == "running"
    assert "running" in STEP_STATES


def test_a_chain_runs_its_steps_in_order_each_released_by_the_previous_ack(app, db):
    ran: list[str] = []

    @app.task(name="step")
    def step(label: str) -> None:
        ran.append(label)

    wf = app.workflow("abc")
    wf.chain(step.step(label="a"), step.step(label="b"), step.step(label="c"))
    handle = wf.enqueue()
    assert _task_states(db, handle) == {"step": "ready", "step-2": "waiting", "step-3": "waiting"}
    assert [s.state for s in handle.status().steps] == ["ready", "waiting", "waiting"]
    app.work(until_empty=True)
    assert ran == ["a", "b", "c"]
    status = app.workflow_status(handle)
    assert status.state == "succeeded" and {s.state for s in status.steps} == {"succeeded"}
    assert status.to_json()["steps"][1]["parents"] == ["step"]


def test_a_fan_in_runs_once_after_every_member_of_its_group_succeeded(app, db):
    ran: list[str] = []

    @app.task(name="member", queue="wide")
    def member(n: int) -> None:
        ran.append(f"m{n}")

    @app.task(name="callback")
    def callback() -> None:
        ran.append("callback")

    wf = app.workflow("fan")
    members = wf.group(*[member.step(n=i) for i in range(6)])
    wf.add(callback.step(), after=members)
    handle = wf.enqueue()
    app.work(until_empty=True)
    assert sorted(ran[:6]) == [f"m{i}" for i in range(6)] and ran[6:] == ["callback"]
    assert handle.status().state == "succeeded"


def test_a_step_with_several_parents_across_the_graph_waits_for_all_of_them(app, db):
    @app.task(name="t")
    def t(x: int) -> None: ...

    wf = app.workflow("graph")
    a = wf.add(t.step(x=1), name="a")
    b = wf.add(t.step(x=2), name="b", after=a)
    wf.add(t.step(x=3), name="c", after=[a, b])
    handle = wf.enqueue()
    consumer = Consumer(db.store, ["default"])
    [task_a] = consumer.claim().tasks
    workflows.remove_and_release(db.store, lambda: db.store.task_ack_many([fenced(task_a)]), "succeeded")
    steps = {s.name: s for s in handle.status().steps}
    assert (steps["b"].state, steps["c"].state, steps["c"].waiting_on) == ("ready", "waiting", 1)


def test_a_dead_step_cancels_its_dependents_and_runs_its_on_failure_step(app, db):
    ran: list[str] = []

    @app.task(name="boom", max_attempts=1)
    def boom() -> None:
        raise RuntimeError("no")

    @app.task(name="after")
    def after(label: str) -> None:
        ran.append(label)

    wf = app.workflow("failing")
    first = wf.add(boom.step(), name="boom")
    wf.chain(after.step(label="next"), after.step(label="then"), after=first)
    wf.add(after.step(label="alert"), after=first, name="alert", on_failure=True)
    handle = wf.enqueue()
    app.work(until_empty=True)
    assert ran == ["alert"]
    states = {s.name: s.state for s in handle.status().steps}
    assert states == {"boom": "dead", "after": "cancelled", "after-2": "cancelled", "alert": "succeeded"}
    assert handle.status().state == "failed"
    assert _task_states(db, handle) == dict.fromkeys(states, "gone")


def test_an_on_failure_step_is_cancelled_when_its_parents_succeed(app, db):
    @app.task(name="ok")
    def ok() -> None: ...

    wf = app.workflow("fine")
    first = wf.add(ok.step(), name="first")
    wf.add(ok.step(), after=first, name="alert", on_failure=True)
    handle = wf.enqueue()
    app.work(until_empty=True)
    assert {s.name: s.state for s in handle.status().steps} == {"first": "succeeded", "alert": "cancelled"}
    assert handle.status().state == "succeeded"


def test_cancelling_a_workflow_cancels_every_unfinished_step_and_deletes_their_tasks(app, db):
    @app.task(name="t")
    def t() -> None: ...

    wf = app.workflow("stop")
    wf.chain(t.step(), t.step(), t.step())
    handle = wf.enqueue()
    assert handle.cancel() == 3
    assert handle.status().state == "cancelled"
    assert {s.state for s in handle.status().steps} == {"cancelled"}
    assert _task_states(db, handle) == dict.fromkeys(handle.task_ids, "gone")
    assert handle.cancel() == 0


def test_a_leased_step_of_a_cancelled_workflow_releases_nothing_when_acked(app, db):
    @app.task(name="t")
    def t() -> None: ...

    wf = app.workflow("late")
    wf.chain(t.step(), t.step())
    handle = wf.enqueue()
    [task] = Consumer(db.store, ["default"]).claim().tasks
    handle.cancel()
    removed = workflows.remove_and_release(db.store, lambda: db.store.task_ack_many([fenced(task)]), "succeeded")
    assert removed == set()
    assert _task_states(db, handle) == dict.fromkeys(handle.task_ids, "gone")


def test_a_workflow_written_in_a_transaction_the_caller_rolls_back_leaves_nothing(app, db):
    if db.dialect != "postgresql":
        pytest.skip("a psycopg connection to the embedded PostgreSQL")
    import psycopg

    @app.task(name="t")
    def t() -> None: ...

    wf = app.workflow("tx")
    wf.chain(t.step(), t.step())
    with psycopg.connect(db.dsn.conninfo) as connection:
        handle = wf.enqueue(connection=connection)
        connection.rollback()
    assert handle.status().state == "unknown"
    assert db.count_tasks() == 0
    with psycopg.connect(db.dsn.conninfo) as connection:
        handle = wf.enqueue(connection=connection)
        connection.commit()
    assert handle.status().state == "running"


def test_an_unknown_workflow_is_unknown_and_a_malformed_id_is_refused(app, db):
    assert app.workflow_status("00000000-0000-0000-0000-000000000000").state == "unknown"
    with pytest.raises(InvalidInput):
        app.workflow_status("nope")


def _ack_at_once(stores: list[TaskStore], tasks: list) -> list[BaseException]:
    """Ack each task through its own store, in threads let go together; the errors raised."""
    return _ack_at_once_many(stores, [[task] for task in tasks])


def test_two_last_parents_acked_at_once_on_two_sessions_release_their_child_exactly_once(app, db):
    @app.task(name="t")
    def t() -> None: ...

    for _round in range(5):
        wf = app.workflow("race")
        parents = wf.group(t.step(), t.step())
        wf.add(t.step(), after=parents, name="child")
        handle = wf.enqueue()
        tasks = Consumer(db.store, ["default"], batch=2).claim().tasks
        assert len(tasks) == 2
        with own_stores(db.client, len(tasks)) as stores:
            assert _ack_at_once(stores, tasks) == []
        child = {s.name: s for s in handle.status().steps}["child"]
        assert (child.state, child.waiting_on) == ("ready", 0)
        assert _task_states(db, handle)["child"] == "ready"
        db.delete_all_tasks()


def test_shardq_workflow_shows_a_workflow_and_its_steps_as_text_and_json(app, db):
    import json
    import subprocess

    from tests.support.cli import SHARDQ

    if db.dialect != "postgresql":
        pytest.skip("the CLI test runs on the embedded PostgreSQL")

    @app.task(name="t")
    def t() -> None: ...

    wf = app.workflow("shown")
    wf.chain(t.step(), t.step())
    handle = wf.enqueue()

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [SHARDQ, *args],
            capture_output=True,
            text=True,
            timeout=120,
            env={"SHARDQ_DSN": db.dsn.conninfo, "PATH": ""},
        )

    shown = json.loads(run("workflow", handle, "--json").stdout)
    assert shown["state"] == "running" and [s["state"] for s in shown["steps"]] == ["ready", "waiting"]
    text = run("workflow", handle).stdout
    assert "running (shown)" in text and "t-2: waiting, waiting on 1 after t" in text
    assert run("workflow", "nope").returncode == 2
    assert "cancelled 2 step(s)" in run("workflow-cancel", handle).stdout


def test_a_step_whose_lease_ran_out_on_its_last_attempt_is_buried_by_the_reaper_and_its_dependents_cancelled(app, db):
    @app.task(name="once", max_attempts=1)
    def once() -> None: ...

    wf = app.workflow("expired")
    first = wf.add(once.step(), name="first")
    wf.add(once.step(), after=first, name="next")
    wf.add(once.step(), after=first, name="alert", on_failure=True)
    handle = wf.enqueue()
    [task] = Consumer(db.store, ["default"], lease_seconds=60).claim().tasks
    db.expire_lease(task.key.id)  # and its claim's record, through which the reaper finds it on PostgreSQL
    reaper = db.client.reaper()
    try:
        reaper.run_once()
    finally:
        reaper.store.session.close()
    assert {s.name: s.state for s in handle.status().steps} == {"first": "dead", "next": "cancelled", "alert": "ready"}
    assert _task_states(db, handle) == {"first": "gone", "next": "gone", "alert": "ready"}


def test_two_acks_crossing_the_parents_of_several_fan_ins_both_commit_without_a_deadlock(app, db):
    @app.task(name="t")
    def t() -> None: ...

    for _round in range(6):
        handles = []
        for _ in range(8):
            wf = app.workflow("crossed")
            parents = wf.group(t.step(), t.step())
            wf.add(t.step(), after=parents, name="child")
            handles.append(wf.enqueue())
        tasks = Consumer(db.store, ["default"], batch=100).claim().tasks
        first = {h.task_ids["t"] for h in handles}
        halves = [[task for task in tasks if (task.id in first) is side] for side in (True, False)]
        halves[1].reverse()  # the second ack names the fan-ins in the opposite order
        with own_stores(db.client, len(halves)) as stores:
            assert _ack_at_once_many(stores, halves) == []
        assert {h.status().steps[0].state for h in handles} == {"ready"}  # "child" sorts first
        db.delete_all_tasks()


def _ack_at_once_many(stores: list[TaskStore], batches: list[list]) -> list[BaseException]:
    """Ack each batch through its own store, all at once; the errors raised."""
    return at_once(
        stores,
        batches,
        lambda store, batch: workflows.remove_and_release(
            store, lambda: store.task_ack_many([fenced(t) for t in batch]), "succeeded"
        ),
    )


def test_requeueing_a_dead_step_resumes_its_workflow_from_it(app, db):
    ran: list[str] = []
    fail = {"boom": True}

    @app.task(name="flaky", max_attempts=1)
    def flaky() -> None:
        if fail["boom"]:
            raise RuntimeError("not yet")
        ran.append("flaky")

    @app.task(name="after")
    def after(label: str) -> None:
        ran.append(label)

    wf = app.workflow("resumed")
    first = wf.add(after.step(label="first"), name="first")
    middle = wf.add(flaky.step(), after=first, name="flaky")
    wf.chain(after.step(label="next"), after.step(label="then"), after=middle)
    handle = wf.enqueue()
    app.work(until_empty=True)
    assert ran == ["first"] and handle.status().state == "failed"
    fail["boom"] = False
    result = admin.dead_requeue(db.store, "default", [handle.task_ids["flaky"]])
    assert result.requeued == 1
    states = {s.name: (s.state, s.waiting_on) for s in handle.status().steps}
    assert states["flaky"] == ("ready", 0) and states["after"] == ("waiting", 1) and states["after-2"] == ("waiting", 1)
    app.work(until_empty=True)
    assert ran == ["first", "flaky", "next", "then"]
    assert handle.status().state == "succeeded"


def test_a_fan_in_that_takes_results_receives_each_parents_kept_result_by_step_name(app, db):
    db.client.set_queue("kept", keep_finished_seconds=3600)
    seen: list[dict] = []

    @app.task(name="square", queue="kept", result=True)
    def square(n: int) -> int:
        return n * n

    @app.task(name="plain", queue="kept")
    def plain() -> None: ...

    @app.task(name="total")
    def total(label: str, results: dict | None = None) -> None:
        seen.append({"label": label, "results": results})

    wf = app.workflow("sum")
    members = wf.group(square.step(n=2), square.step(n=3), plain.step())
    wf.add(total.step(label="fan-in"), after=members)
    total.defer(label="alone")  # outside a workflow: no results read, the default stays
    handle = wf.enqueue()
    app.work(until_empty=True)
    assert {"label": "alone", "results": None} in seen
    assert {"label": "fan-in", "results": {"square": 4, "square-2": 9, "plain": None}} in seen
    assert handle.status().state == "succeeded"
