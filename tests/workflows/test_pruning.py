"""Pruning finished workflows (shardq.maintenance.pruning.prune_workflows, run by the reaper):
deleted with their steps and edges after their retention, in bounded statements."""

from __future__ import annotations

import pytest

import shardq
from shardq.maintenance import pruning
from shardq.maintenance.pruning import KEEP_WORKFLOWS_SECONDS, prune_workflows
from shardq.maintenance.reaper import Reaper

DAY = 86_400.0
CHAIN = {"a": "succeeded", "b": "succeeded", "c": "succeeded"}
CHAIN_EDGES = (("a", "b"), ("b", "c"))


def test_the_reaper_deletes_a_workflow_finished_longer_ago_than_a_day_with_its_steps_and_edges(db):
    old = db.make_workflow(CHAIN, edges=CHAIN_EDGES, finished_ago=DAY + 60)
    failed = db.make_workflow({"a": "dead", "b": "cancelled"}, edges=(("a", "b"),), finished_ago=2 * DAY)
    recent = db.make_workflow(CHAIN, edges=CHAIN_EDGES, created_ago=2 * DAY, finished_ago=DAY - 60)
    running = db.make_workflow(
        {"a": "succeeded", "b": "ready", "c": "waiting"}, edges=CHAIN_EDGES, finished_ago=3 * DAY
    )
    Reaper(db.store).run_once()
    assert db.workflow_rows(old) == db.workflow_rows(failed) == (0, 0, 0)
    assert db.workflow_rows(recent) == db.workflow_rows(running) == (1, 3, 2)
    assert db.client.workflow_status(old).state == "unknown"
    assert db.client.workflow_status(recent).state == "succeeded"


def test_a_queue_that_keeps_finished_tasks_longer_keeps_its_workflows_as_long(db):
    db.client.set_queue("kept", keep_finished_seconds=3 * DAY)
    db.client.set_queue("brief", keep_finished_seconds=60)
    kept = db.make_workflow(CHAIN, edges=CHAIN_EDGES, queue="kept", finished_ago=2 * DAY)
    brief = db.make_workflow(CHAIN, edges=CHAIN_EDGES, queue="brief", finished_ago=2 * DAY)
    assert prune_workflows(db.store).pruned == 1
    assert db.workflow_rows(kept) == (1, 3, 2) and db.workflow_rows(brief) == (0, 0, 0)
    assert prune_workflows(db.store, keep_seconds=0.0).pruned == 0  # the queue's three days still hold
    assert KEEP_WORKFLOWS_SECONDS == DAY


def test_a_workflow_run_by_a_worker_is_pruned_once_its_retention_passed(db):
    app = shardq.App(db.dsn)
    try:

        @app.task(name="t")
        def t(n: int) -> None: ...

        wf = app.workflow("ran")
        members = wf.group(t.step(n=1), t.step(n=2))
        wf.add(t.step(n=3), after=members)
        handle = wf.enqueue()
        app.work(until_empty=True)
    finally:
        app.close()
    assert prune_workflows(db.store).pruned == 0  # finished just now: kept a day
    assert prune_workflows(db.store, keep_seconds=0.0).pruned == 1
    assert db.client.workflow_status(handle).state == "unknown"


def test_a_chain_run_by_a_worker_is_pruned_though_its_steps_released_directly_still_read_waiting(db):
    app = shardq.App(db.dsn)
    try:

        @app.task(name="t")
        def t(n: int) -> None: ...

        wf = app.workflow("chain")
        wf.chain(t.step(n=1), t.step(n=2), t.step(n=3))
        handle = wf.enqueue()
        app.work(until_empty=True)
    finally:
        app.close()
    assert db.step_states(handle) == ["ready", "waiting", "succeeded"]  # the root, released, the leaf
    assert prune_workflows(db.store, keep_seconds=0.0).pruned == 1
    assert db.client.workflow_status(handle).state == "unknown"


def test_each_statement_deletes_at_most_a_batch_and_a_big_workflow_goes_over_several(db, monkeypatch):
    monkeypatch.setattr(pruning, "PRUNE_BATCH", 4)
    steps = {f"s{i:02d}": "succeeded" for i in range(11)}
    edges = tuple((f"s{i:02d}", f"s{i + 1:02d}") for i in range(10))
    big = db.make_workflow(steps, edges=edges, finished_ago=2 * DAY)
    deleted: list[int] = []
    real_run = db.store.run

    def counting_run(plan):
        result = real_run(plan)
        if isinstance(result, int):
            deleted.append(result)
        return result

    monkeypatch.setattr(db.store, "run", counting_run)
    assert prune_workflows(db.store).pruned == 1
    assert db.workflow_rows(big) == (0, 0, 0)
    assert max(deleted) <= 4 and sum(deleted) == 11 + 10 + 1


def test_the_walk_resumes_after_old_running_workflows_from_where_the_last_call_stopped(db, monkeypatch):
    monkeypatch.setattr(pruning, "PRUNE_BATCH", 2)
    running = [db.make_workflow({"a": "ready"}, created_ago=5 * DAY - i) for i in range(2)]
    finished = [db.make_workflow({"a": "succeeded"}, finished_ago=4 * DAY - i) for i in range(2)]
    first = prune_workflows(db.store, max_pages=1)
    assert first.pruned == 0 and first.resume_after is not None  # a page of running ones only
    second = prune_workflows(db.store, max_pages=1, after=first.resume_after)
    assert second.pruned == 2
    assert [db.workflow_rows(w)[0] for w in running + finished] == [1, 1, 0, 0]


def test_a_workflow_left_without_steps_by_an_interrupted_prune_is_finished_by_the_next(db):
    orphan = db.make_workflow({}, created_ago=2 * DAY)
    assert prune_workflows(db.store).pruned == 1
    assert db.workflow_rows(orphan) == (0, 0, 0)


@pytest.mark.parametrize("state", ["waiting", "ready"])
def test_a_workflow_with_a_step_not_finished_is_never_pruned_however_old(db, state):
    kept = db.make_workflow({"a": "dead", "b": state}, created_ago=30 * DAY, finished_ago=30 * DAY)
    assert prune_workflows(db.store, keep_seconds=0.0).pruned == 0
    assert db.workflow_rows(kept) == (1, 2, 0)
