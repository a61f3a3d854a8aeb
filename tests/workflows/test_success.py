"""A step's success is its task row's deletion: its ack writes nothing of a step with children
(shardq.workflows.steps._succeeded), and every reader of a step's state reads a step 'ready' without its
task row as succeeded — status, cancel, pruning, resume. Cancelling a step's task by id cancels
the step and its dependents, so that its absent task row is never read as a success."""

from __future__ import annotations

import uuid

from shardq.engine import POSTGRESQL
from shardq.operations.workflows import OWN_ROW
from shardq.sql.plan import ENGINE
from shardq.workflows import steps as workflows
from tests.support.plans import drive, names


def test_an_ack_of_steps_with_children_reads_them_and_writes_only_those_without_children():
    w, t0, t1, t2 = uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    acked = [(w, "m0", OWN_ROW, "fan-in", t0, None, None), (w, "m1", OWN_ROW, "fan-in", t1, None, None)]

    def answer(rows):
        def serve(request):
            if request is ENGINE:
                return POSTGRESQL
            return rows if getattr(request, "name", "") == "workflow_steps_acked" else []

        return serve

    def statements(plan):
        return [request for request in drive(plan, answer_with)[1] if request is not ENGINE]

    answer_with = answer(acked)
    sent = statements(workflows._succeeded([t0, t1], wake=False))
    # no write of the steps with children: their children counted off, nothing released
    assert names(sent) == ["workflow_steps_acked", "workflow_children_count_off"]
    answer_with = answer([*acked, (w, "fan-in", 0, None, t2, None, None)])
    sent = statements(workflows._succeeded([t0, t1, t2], wake=False))
    assert names(sent) == ["workflow_steps_acked", "workflow_steps_finish", "workflow_children_count_off"]
    assert sent[1].params["task_ids"] == [t2] and sent[1].params["state"] == "succeeded"
    assert sent[2].params["steps"] == ["fan-in"]  # the leaf moves nothing on


def _two_queues(app, ran):
    @app.task(name="first", queue="first")
    def first() -> None:
        ran.append("first")

    @app.task(name="second", queue="second")
    def second() -> None:
        ran.append("second")

    @app.task(name="third", queue="second")
    def third() -> None:
        ran.append("third")

    wf = app.workflow("abc")
    wf.chain(first.step(), second.step(), third.step())
    return wf.enqueue()


def _states(app, handle) -> dict[str, str]:
    return {s.name: s.state for s in app.workflow_status(handle).steps}


def test_a_step_whose_ack_deleted_its_task_reads_succeeded_and_its_row_stays_as_it_was(app, db):
    ran: list[str] = []
    handle = _two_queues(app, ran)
    app.work(["first"], until_empty=True)
    assert ran == ["first"]
    assert _states(app, handle) == {"first": "succeeded", "second": "ready", "third": "waiting"}
    rows = db.step_of_task(handle.task_ids["first"], "state", "finished_at")
    assert rows == [{"state": "ready", "finished_at": None}]  # nothing written: the task row's absence
    app.work(until_empty=True)
    status = app.workflow_status(handle)
    assert status.state == "succeeded" and {s.state for s in status.steps} == {"succeeded"}
    # In name order: first and second have a child (nothing written), third has none (written).
    assert [s.finished_at is not None for s in status.steps] == [False, False, True]


def test_cancelling_a_workflow_leaves_a_step_that_succeeded_succeeded(app, db):
    ran: list[str] = []
    handle = _two_queues(app, ran)
    app.work(["first"], until_empty=True)
    assert handle.cancel() == 2  # second (ready) and third (waiting); not first, which succeeded
    assert _states(app, handle) == {"first": "succeeded", "second": "cancelled", "third": "cancelled"}
    assert app.workflow_status(handle).state == "cancelled"


def test_cancelling_a_steps_task_by_id_cancels_the_step_and_its_dependents(app, db):
    ran: list[str] = []
    handle = _two_queues(app, ran)
    app.work(["first"], until_empty=True)
    result = app.client.cancel(handle.task_ids["second"])
    assert result.cancelled == (handle.task_ids["second"],)
    assert _states(app, handle) == {"first": "succeeded", "second": "cancelled", "third": "cancelled"}
    assert app.workflow_status(handle).state == "cancelled"
    assert app.work(until_empty=True).acked == 0  # nothing left to run


def test_cancelling_a_waiting_steps_task_by_id_releases_nothing_when_its_parent_succeeds(app, db):
    ran: list[str] = []
    handle = _two_queues(app, ran)
    app.client.cancel(handle.task_ids["second"])
    app.work(until_empty=True)
    assert ran == ["first"]
    assert _states(app, handle) == {"first": "succeeded", "second": "cancelled", "third": "cancelled"}
