"""A step's result reaches its children in a queue that keeps no finished tasks too (migration
0018): the ack keeps the result of a step with children, declared ``result=True``, in its step
row; in a queue that keeps finished tasks the history row has it and the step row is not written."""

from __future__ import annotations

import datetime as dt
import uuid

from shardq.engine import POSTGRESQL
from shardq.models.leases import HandoffOffer
from shardq.sql.plan import ENGINE
from shardq.workflows import steps as workflows
from tests.support.plans import drive, names


def test_an_ack_keeps_results_only_of_steps_with_children_in_one_statement():
    w, parent, leaf = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    acked = [(w, "a", 1, "b", parent, None, None), (w, "z", 0, None, leaf, None, None)]
    results = {parent: '{"n": 3}', leaf: "7"}

    def answer(request):
        if request is ENGINE:
            return POSTGRESQL
        return acked if getattr(request, "name", "") == "workflow_steps_acked" else []

    _, sent = drive(workflows._succeeded([parent, leaf], wake=False, results=results), answer)
    keep = [request for request in sent if getattr(request, "name", "") == "workflow_steps_keep_results"]
    assert [(r.params["task_ids"], r.params["results"]) for r in keep] == [([parent], ['{"n": 3}'])]
    _, sent = drive(workflows._succeeded([parent, leaf], wake=False), answer)
    assert "workflow_steps_keep_results" not in names(sent)  # no result declared: nothing written


def test_an_ack_that_takes_the_next_step_keeps_the_result_of_the_step_before_it():
    w, parent = uuid.uuid4(), uuid.uuid4()
    offer = HandoffOffer(("q",), (30.0,), room=10)
    now = dt.datetime.now(dt.UTC)
    # The acked step returns no row of its own (its child was taken): the taken task's row names it.
    taken = (None,) * 7 + (0, "q", 0, now, uuid.uuid4(), 1, 25, b"{}", now, now, 0, w, uuid.uuid4(), parent)

    def answer(request):
        if request is ENGINE:
            return POSTGRESQL
        return [taken] if getattr(request, "name", "") == "workflow_steps_acked_take" else []

    _, sent = drive(workflows._succeeded([parent], wake=False, results={parent: '{"n": 3}'}, handoff=offer), answer)
    assert [r.params["parents"] for r in sent if getattr(r, "name", "") == "workflow_steps_acked_take"] == [True]
    keep = [request for request in sent if getattr(request, "name", "") == "workflow_steps_keep_results"]
    assert [(r.params["task_ids"], r.params["results"]) for r in keep] == [([parent], ['{"n": 3}'])]
    assert [t.key.id for t in offer.tasks] == [taken[11]]


def _chain_with_results(app, seen, queue):
    @app.task(name="measure", queue=queue, result=True)
    def measure(n: int) -> dict:
        return {"n": n}

    @app.task(name="silent", queue=queue)
    def silent() -> int:
        return 1  # not declared result=True: not kept

    @app.task(name="report", queue=queue)
    def report(results: dict | None = None) -> None:
        seen.append(results)

    wf = app.workflow("results")
    first = wf.add(measure.step(n=3), name="first")
    quiet = wf.add(silent.step(), name="quiet")
    wf.add(report.step(), after=[first, quiet], name="report")
    return wf.enqueue()


def test_a_child_receives_its_parents_results_in_a_queue_that_keeps_no_finished_tasks(app, db):
    seen: list[dict | None] = []
    handle = _chain_with_results(app, seen, "nothing-kept")
    app.work(until_empty=True)
    assert seen == [{"first": {"n": 3}, "quiet": None}]
    assert handle.status().state == "succeeded"


def test_a_queue_that_keeps_finished_tasks_has_the_result_in_its_history_not_in_the_step(app, db):
    db.client.set_queue("kept", keep_finished_seconds=3600)
    seen: list[dict | None] = []
    handle = _chain_with_results(app, seen, "kept")
    app.work(until_empty=True)
    assert seen == [{"first": {"n": 3}, "quiet": None}]
    rows = db.step_of_task(handle.task_ids["first"], "result")
    assert rows == [{"result": None}]
