"""Workflow graphs checked without a database (shardq.models.workflow_graph, shardq.app.workflow)."""

from __future__ import annotations

import pytest

import shardq
from shardq.app import AppTask
from shardq.errors import InvalidInput
from shardq.models.workflow_graph import MAX_STEPS, Graph, StepSpec, check


def _graph(*steps: tuple[str, tuple[str, ...]]) -> Graph:
    graph = Graph("g")
    for name, parents in steps:
        graph.add(StepSpec(name, "t", b"{}", "q", parents=parents))
    return graph


def test_check_orders_every_parent_before_its_children():
    order = check(_graph(("d", ("b", "c")), ("b", ("a",)), ("c", ("a",)), ("a", ())))
    names = [s.name for s in order]
    assert names[0] == "a" and names[-1] == "d" and set(names[1:3]) == {"b", "c"}


@pytest.mark.parametrize(
    ("steps", "words"),
    [
        ((("a", ("b",)), ("b", ("a",)), ("r", ())), "cycle"),
        ((("a", ("a",)),), "cycle"),
        ((("a", ()), ("b", ("nope",))), "'nope' is no step"),
        ((("a", ()), ("a", ())), "declared twice"),
        ((("a", ()), ("b", ("a", "a"))), "named twice"),
        ((), "no steps"),
    ],
)
def test_check_refuses_a_graph_that_cannot_run_naming_the_step(steps, words):
    with pytest.raises(InvalidInput, match=words):
        check(_graph(*steps))


def test_check_refuses_an_on_failure_step_without_parents_and_a_graph_over_the_limit():
    graph = Graph("g", [StepSpec("a", "t", b"{}", "q", on_failure=True)])
    with pytest.raises(InvalidInput, match="'a': an on-failure step needs a parent"):
        check(graph)
    big = Graph("g", [StepSpec(f"s{i}", "t", b"{}", "q") for i in range(MAX_STEPS + 1)])
    with pytest.raises(InvalidInput, match="over the limit"):
        check(big)


def _app() -> tuple[shardq.App, AppTask[[str], None], AppTask[[], None]]:
    app = shardq.App("postgresql://nobody@127.0.0.1:1/none")  # never connects in these tests

    @app.task(name="fetch", queue="io")
    def fetch(url: str) -> None: ...

    @app.task(name="merge")
    def merge() -> None: ...

    return app, fetch, merge


def test_the_builder_names_steps_and_links_chains_groups_and_fan_ins():
    app, fetch, merge = _app()
    wf = app.workflow("w")
    group = wf.group(fetch.step(url="a"), fetch.step(url="b"))
    fan_in = wf.add(merge.step(), after=group)
    chain = wf.chain(fetch.step(url="c"), merge.step(), after=fan_in)
    assert group == ["fetch", "fetch-2"] and fan_in == "merge"
    steps = {s.name: s for s in wf.check()}
    assert steps["merge"].parents == ("fetch", "fetch-2")
    assert steps[chain[0]].parents == ("merge",) and steps[chain[1]].parents == (chain[0],)
    assert steps["fetch"].queue == "io" and steps["merge"].queue == "default"


def test_the_builder_refuses_bad_arguments_foreign_tasks_and_step_only_options_before_any_write():
    app, fetch, _merge = _app()
    other = shardq.App("postgresql://nobody@127.0.0.1:1/none")

    @other.task(name="elsewhere")
    def elsewhere() -> None: ...

    wf = app.workflow("w")
    with pytest.raises(InvalidInput, match="fetch"):
        fetch.step(nope=1)
    with pytest.raises(InvalidInput, match="takes no delay"):
        fetch.configure(delay=5).step(url="a")
    with pytest.raises(InvalidInput, match="takes no concurrency_key"):
        fetch.configure(concurrency_key="tenant:1").step(url="a")
    wf.add(elsewhere.step())
    with pytest.raises(InvalidInput, match="'elsewhere' is not declared in this app"):
        wf.enqueue()  # refused before the client (which could not connect) is reached


class _CountingNames(set):
    """A set of step names that counts the lookups made in it."""

    lookups = 0

    def __contains__(self, name: object) -> bool:
        type(self).lookups += 1
        return super().__contains__(name)


def test_naming_the_steps_of_a_wide_group_takes_a_few_lookups_per_step_not_one_per_earlier_step():
    import shardq
    from shardq.app.workflow import Workflow

    app = shardq.App("postgresql://unused.invalid/none")  # declaring only: never connects

    @app.task(name="t")
    def t(n: int) -> None: ...

    wf = Workflow("wide", lambda: app.client, lambda task: task in app.tasks)
    wf._names = _CountingNames()
    names = wf.group(*[t.step(n=i) for i in range(2_000)])
    wf.add(t.step(n=-1), name="t-2001")  # a name given by hand is skipped when its turn comes
    more = wf.group(t.step(n=0), t.step(n=1))
    assert names[:3] == ["t", "t-2", "t-3"] and names[-1] == "t-2000"
    assert more == ["t-2002", "t-2003"]
    assert _CountingNames.lookups < 3 * 2_004
