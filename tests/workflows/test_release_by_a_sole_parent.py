"""A sole parent (a chain's step but the last: its one child has no other parent and is not an
on-failure step; migration 0017): its ack makes the child's task claimable directly, with no
count lowered and no step row written. The child's row stays 'waiting'; every reader of a step's state reads it by
its task row: 'ready' while the task is no longer waiting, succeeded once it is gone."""

from __future__ import annotations

import uuid

import pytest

from shardq.admin import actions as admin
from shardq.engine import POSTGRESQL
from shardq.models.workflow_graph import StepSpec
from shardq.operations.workflows import OWN_ROW, fan_in_counts
from shardq.sql.plan import ENGINE
from shardq.workflows import steps as workflows
from tests.support.plans import drive, names


def _spec(name: str, parents: tuple[str, ...] = (), *, on_failure: bool = False) -> StepSpec:
    return StepSpec(name, "t", b"", "default", parents=parents, on_failure=on_failure)


def test_a_step_is_a_sole_parent_when_its_one_child_has_no_other_parent_and_is_not_on_failure():
    steps = [
        _spec("a"),
        _spec("b", ("a",)),
        _spec("c", ("b",)),  # a chain
        _spec("m0"),
        _spec("m1"),
        _spec("fan-in", ("m0", "m1")),  # a group fanning in
        _spec("x"),
        _spec("rescue", ("x",), on_failure=True),  # an on-failure child
        _spec("split"),
        _spec("left", ("split",)),
        _spec("right", ("split",)),
    ]  # two children
    sole = fan_in_counts(steps, lambda parents: 0).sole_child
    assert sole == {"a": "b", "b": "c"}  # not m0/m1 (fan-in), x (on-failure child), split (two children)
    sharded = fan_in_counts(
        [_spec("p"), _spec("q", ("p",)), _spec("w", ("p", "y")), _spec("y")], lambda parents: 2 if parents >= 2 else 0
    )
    # w counts p (and y) in a shard: p has both kinds, y's only child is counted in shards
    assert sharded.only_child == {"p": "q", "y": "w"} and sharded.sole_child == {}


def _answer(acked, moved=()):
    def answer(request):
        if request is ENGINE:
            return POSTGRESQL
        return {"workflow_steps_acked": acked, "workflow_children_count_off": list(moved)}.get(request.name, [])

    return answer


def test_the_ack_of_sole_parents_releases_their_children_in_one_statement_without_counting_them_off():
    w, t_a, t_b, child_a, child_b = (uuid.uuid4() for _ in range(5))
    acked = [(w, "a", OWN_ROW, "a2", t_a, child_a, None), (w, "b", OWN_ROW, "b2", t_b, child_b, None)]
    _, sent = drive(workflows._succeeded([t_a, t_b], wake=True), _answer(acked))
    calls = [request for request in sent if request is not ENGINE]
    assert names(calls) == ["workflow_steps_acked", "workflow_tasks_release"]
    assert set(calls[1].params["ids"]) == {child_a, child_b} and calls[1].params["wake"] is True


def test_an_ack_that_also_counts_a_fan_in_off_releases_both_in_one_statement():
    w, t_a, t_m, child_a, fan_in = (uuid.uuid4() for _ in range(5))
    acked = [(w, "a", OWN_ROW, "a2", t_a, child_a, None), (w, "m0", OWN_ROW, "fan-in", t_m, None, None)]
    _, sent = drive(workflows._succeeded([t_a, t_m], wake=False), _answer(acked, [(w, "fan-in", fan_in, "ready")]))
    calls = [request for request in sent if request is not ENGINE]
    assert names(calls) == ["workflow_steps_acked", "workflow_children_count_off", "workflow_tasks_release"]
    assert calls[1].params["steps"] == ["fan-in"]  # the sole parent's child is not counted off
    assert set(calls[2].params["ids"]) == {child_a, fan_in}


def _chain(app, ran):
    @app.task(name="one", queue="one")
    def one() -> None:
        ran.append("one")

    @app.task(name="two", queue="two")
    def two() -> None:
        ran.append("two")

    @app.task(name="three", queue="three")
    def three() -> None:
        ran.append("three")

    wf = app.workflow("chain")
    wf.chain(one.step(), two.step(), three.step())
    return wf.enqueue()


def _steps(app, handle) -> dict[str, tuple[str, int]]:
    return {s.name: (s.state, s.waiting_on) for s in app.workflow_status(handle).steps}


def _row_state(db, task_id) -> str:
    rows = db.step_of_task(task_id, "state")
    return rows[0]["state"]


def test_a_chain_step_released_by_its_sole_parent_keeps_its_row_and_reads_ready_then_succeeded(app, db):
    ran: list[str] = []
    handle = _chain(app, ran)
    app.work(["one"], until_empty=True)
    assert _row_state(db, handle.task_ids["two"]) == "waiting"  # not written by the release
    assert _steps(app, handle) == {"one": ("succeeded", 0), "two": ("ready", 0), "three": ("waiting", 1)}
    app.work(["two"], until_empty=True)
    assert _steps(app, handle) == {"one": ("succeeded", 0), "two": ("succeeded", 0), "three": ("ready", 0)}
    app.work(until_empty=True)
    assert ran == ["one", "two", "three"]
    status = app.workflow_status(handle)
    assert status.state == "succeeded" and {s.state for s in status.steps} == {"succeeded"}
    assert _row_state(db, handle.task_ids["three"]) == "succeeded"  # the leaf dates the end


def test_a_step_released_directly_that_dies_reads_dead_and_resumes_when_requeued(app, db):
    ran: list[str] = []
    attempts: list[int] = []

    @app.task(name="first", queue="q")
    def first() -> None:
        ran.append("first")

    @app.task(name="flaky", queue="q", max_attempts=1)
    def flaky() -> None:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("first time")
        ran.append("flaky")

    @app.task(name="last", queue="q")
    def last() -> None:
        ran.append("last")

    wf = app.workflow("resume")
    wf.chain(first.step(), flaky.step(), last.step())
    handle = wf.enqueue()
    app.work(until_empty=True)
    assert _steps(app, handle) == {"first": ("succeeded", 0), "flaky": ("dead", 0), "last": ("cancelled", 1)}
    assert app.workflow_status(handle).state == "failed"
    assert admin.dead_requeue(db.store, "q", [handle.task_ids["flaky"]]).requeued == 1
    assert _steps(app, handle) == {"first": ("succeeded", 0), "flaky": ("ready", 0), "last": ("waiting", 1)}
    app.work(until_empty=True)
    assert ran == ["first", "flaky", "last"] and app.workflow_status(handle).state == "succeeded"


def test_cancelling_a_workflow_cancels_a_step_released_directly_and_it_waits_on_none(app, db):
    ran: list[str] = []
    handle = _chain(app, ran)
    app.work(["one"], until_empty=True)
    assert handle.cancel() == 2
    assert _steps(app, handle) == {"one": ("succeeded", 0), "two": ("cancelled", 0), "three": ("cancelled", 1)}
    assert app.work(until_empty=True).acked == 0


def test_cancelling_a_step_released_directly_by_its_task_id_cancels_it_and_its_dependents(app, db):
    ran: list[str] = []
    handle = _chain(app, ran)
    app.work(["one"], until_empty=True)
    assert app.client.cancel(handle.task_ids["two"]).cancelled == (handle.task_ids["two"],)
    assert _steps(app, handle) == {"one": ("succeeded", 0), "two": ("cancelled", 0), "three": ("cancelled", 1)}
    assert app.workflow_status(handle).state == "cancelled"
    assert app.work(until_empty=True).acked == 0


@pytest.mark.parametrize("in_shards", [False, True], ids=["own-row", "in-shards"])
def test_resuming_a_fan_in_counts_a_parent_released_directly_that_succeeded_as_succeeded(app, db, request, in_shards):
    if in_shards:
        request.getfixturevalue("shards")  # the fan-in counts b and x in two shard rows
    ran: list[str] = []
    failures: list[int] = []

    @app.task(name="step", queue="q")
    def step(name: str) -> None:
        ran.append(name)

    @app.task(name="flaky", queue="q", max_attempts=1)
    def flaky() -> None:
        failures.append(1)
        if len(failures) == 1:
            raise RuntimeError("first time")
        ran.append("flaky")

    wf = app.workflow("resume-fan-in")
    a = wf.add(step.step(name="a"), name="a")
    b = wf.add(step.step(name="b"), after=a, name="b")  # released directly by a, its sole parent
    x = wf.add(flaky.step(), name="x")
    wf.add(step.step(name="join"), after=[b, x], name="join")
    handle = wf.enqueue()
    app.work(until_empty=True)
    assert _row_state(db, handle.task_ids["b"]) == "waiting"
    assert _steps(app, handle)["b"] == ("succeeded", 0) and _steps(app, handle)["join"][0] == "cancelled"
    admin.dead_requeue(db.store, "q", [handle.task_ids["x"]])
    assert _steps(app, handle)["join"] == ("waiting", 1)  # on x alone: b succeeded
    app.work(until_empty=True)
    assert sorted(ran) == ["a", "b", "flaky", "join"] and app.workflow_status(handle).state == "succeeded"
