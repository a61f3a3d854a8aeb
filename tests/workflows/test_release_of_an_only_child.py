"""A step's only child (migration 0016): its ack counts it off by name, grouped, without reading
the parent's edges; every other parent, and every row written before the column, by its edges."""

from __future__ import annotations

import uuid

from shardq.operations.workflows import IN_SHARDS, OWN_ROW, fan_in_counts
from shardq.workflows import steps as workflows
from tests.support.plans import drive, names
from tests.support.workflows import _spec


def test_a_step_has_an_only_child_when_exactly_one_child_counts_it_in_its_own_row():
    steps = [_spec("a"), _spec("b"), _spec("c", ("a",)), _spec("d", ("a", "b")), _spec("wide", ("b", "c"))]
    counts = fan_in_counts(steps, lambda parents: 0)
    assert counts.only_child == {"c": "wide"}  # a has c and d, b has d and wide: several
    sharded = fan_in_counts(
        [_spec("p"), _spec("q", ("p",)), _spec("w", ("p", "x")), _spec("x")], lambda parents: 2 if parents >= 2 else 0
    )
    # w counts p in a shard: not p's own-row child; x's one child is w, counted in shard 1 of 2
    assert sharded.only_child == {"p": "q", "x": "w"} and sharded.only_shard == {"x": 1}
    assert sharded.child_kinds["p"] == OWN_ROW | IN_SHARDS and sharded.child_kinds["x"] == IN_SHARDS


def test_an_ack_of_only_children_counts_them_off_by_name_grouped_in_one_statement():
    w1, w2 = uuid.uuid4(), uuid.uuid4()
    finished = [
        (w1, "m0", OWN_ROW, "fan-in"),
        (w1, "m1", OWN_ROW, "fan-in"),
        (w2, "a", OWN_ROW, "b"),
        (w1, "fan-in", 0, None),
    ]
    _, sent = drive(workflows._advance(finished))
    assert names(sent) == ["workflow_children_count_off"]
    params = sent[0].params
    assert sorted(zip(params["workflow_ids"], params["steps"], params["counts"])) == sorted(
        [(w1, "fan-in", 2), (w2, "b", 1)]
    )


def test_an_ack_with_a_parent_of_several_children_counts_every_own_row_child_through_the_edges():
    w = uuid.uuid4()
    finished = [(w, "m0", OWN_ROW, "fan-in"), (w, "split", OWN_ROW, None)]
    _, sent = drive(workflows._advance(finished))
    # One statement locks every own-row child, in key order: never two sets in two statements.
    assert names(sent) == ["workflow_children_advance"]
    assert sorted(sent[0].params["steps"]) == ["m0", "split"]


def test_steps_written_without_an_only_child_still_release_their_fan_in_through_the_edges(app, db):
    ran: list[str] = []

    @app.task(name="member")
    def member(n: int) -> None:
        ran.append(f"m{n}")

    @app.task(name="callback")
    def callback() -> None:
        ran.append("callback")

    wf = app.workflow("before-0016")
    members = wf.group(*[member.step(n=i) for i in range(3)])
    wf.add(callback.step(), after=members, name="fan-in")
    handle = wf.enqueue()
    # As rows written before the column: no only child.
    db.forget_only_children(handle)
    app.work(until_empty=True)
    assert ran[-1] == "callback" and sorted(ran[:-1]) == ["m0", "m1", "m2"]
    assert app.workflow_status(handle).state == "succeeded"
