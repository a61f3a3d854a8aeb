"""Wide fan-ins counted in shard rows (docs/workflows.md, "Fan-in in shards"): each parent's ack
lowers its own shard's row; the ack that drains a shard counts it off the child's own row, so the
child is released once, by the last of its shards, even when the last parents of two shards are
acked at the same moment."""

from __future__ import annotations

import threading
import uuid

import psycopg
import pytest

from shardq.admin import actions as admin
from shardq.lifecycle.claim import Consumer
from shardq.maintenance.pruning import prune_workflows
from shardq.operations.workflows import IN_SHARDS, OWN_ROW, FinishedStep, fan_in_counts
from shardq.workflows import steps as workflows
from tests.support.concurrency import at_once, own_stores
from tests.support.factories import fenced
from tests.support.probes import lock_step, lock_waiters
from tests.support.workflows import _spec, _until


def test_only_a_fan_in_over_the_threshold_is_counted_in_shards_each_of_them_as_full_as_the_others():
    wide = tuple(f"p{i}" for i in range(10))
    steps = [*(_spec(p) for p in wide), _spec("narrow", ("p0",)), _spec("wide", wide)]
    counts = fan_in_counts(steps, lambda parents: 4 if parents >= 5 else 0)
    assert counts.waiting_on["narrow"] == 1 and counts.waiting_on["wide"] == 4  # its shards
    assert counts.shards == [("wide", 0, 3), ("wide", 1, 3), ("wide", 2, 2), ("wide", 3, 2)]
    assert sorted(-1 if shard is None else shard for _p, child, shard in counts.edges if child == "wide") == [
        0,
        0,
        0,
        1,
        1,
        1,
        2,
        2,
        3,
        3,
    ]
    assert [shard for _p, child, shard in counts.edges if child == "narrow"] == [None]
    assert counts.child_kinds["p0"] == OWN_ROW | IN_SHARDS and counts.child_kinds["p1"] == IN_SHARDS
    assert counts.child_kinds["wide"] == counts.child_kinds["narrow"] == 0  # no children: no statement


def test_a_wide_fan_in_counts_its_parents_in_shard_rows_and_runs_once_after_every_parent(app, db, shards):
    ran: list[str] = []

    @app.task(name="member")
    def member(n: int) -> None:
        ran.append(f"m{n}")

    @app.task(name="callback")
    def callback() -> None:
        ran.append("callback")

    wf = app.workflow("wide")
    wf.add(callback.step(), after=wf.group(*[member.step(n=i) for i in range(7)]), name="fan-in")
    handle = wf.enqueue()
    rows = db.workflow_counts()
    assert [(r["shard"], r["waiting_on"]) for r in rows] == [(0, 4), (1, 3)]
    fan_in = {s.name: s for s in handle.status().steps}["fan-in"]
    assert (fan_in.state, fan_in.waiting_on) == ("waiting", 7)  # parents, summed over its shards
    app.work(until_empty=True)
    assert sorted(ran[:7]) == [f"m{i}" for i in range(7)] and ran[7:] == ["callback"]
    assert handle.status().state == "succeeded"
    assert {r["waiting_on"] for r in db.workflow_counts()} == {0}


def _lock_waiters(conn) -> int:
    """Backends of this database waiting on a lock."""
    return lock_waiters(conn)


def _two_shard_fan_in(app, t):
    wf = app.workflow("race")
    wf.add(t.step(), name="child", after=wf.group(t.step(), t.step()))  # one parent in each shard
    return wf.enqueue()


def test_the_last_parents_of_two_shards_acked_at_once_release_their_fan_in_exactly_once(app, db, shards):
    @app.task(name="t")
    def t() -> None: ...

    for _round in range(6):
        handle = _two_shard_fan_in(app, t)
        tasks = Consumer(db.store, ["default"], batch=2).claim().tasks
        assert len(tasks) == 2
        with own_stores(db.client, 2) as stores:
            assert (
                at_once(
                    stores,
                    tasks,
                    lambda store, task: workflows.remove_and_release(
                        store, lambda: store.task_ack_many([fenced(task)]), "succeeded"
                    ),
                )
                == []
            )
        child = {s.name: s for s in handle.status().steps}["child"]
        assert (child.state, child.waiting_on) == ("ready", 0)
        assert db.task_states_by_id()[handle.task_ids["child"]] == "ready"
        db.delete_all_tasks()


@pytest.mark.parametrize("db", ["postgresql"], indirect=True)
def test_two_acks_that_each_drain_a_shard_queue_on_the_child_and_the_second_releases_it(app, db, shards):
    # The interleaving that matters, made certain: each ack drains its own shard (no wait), then
    # both queue on the child's row, held by a third connection. Let go, the first counts one
    # shard off (2 -> 1) and commits; the second, which waited for it, re-reads the row and counts
    # the other off (1 -> 0): it releases the child. A statement that skipped the row it waited
    # for (as one did, see workflow_children_count_off) leaves the child waiting forever.
    @app.task(name="t")
    def t() -> None: ...

    handle = _two_shard_fan_in(app, t)
    tasks = Consumer(db.store, ["default"], batch=2).claim().tasks
    holder = psycopg.connect(db.dsn.conninfo)
    watcher = psycopg.connect(db.dsn.conninfo, autocommit=True)
    try:
        lock_step(holder, "child")
        with own_stores(db.client, 2) as stores:
            errors: list[BaseException] = []

            def ack(store, task) -> None:
                try:
                    workflows.remove_and_release(store, lambda: store.task_ack_many([fenced(task)]), "succeeded")
                except Exception as exc:  # noqa: BLE001 - reported below
                    errors.append(exc)

            threads = [threading.Thread(target=ack, args=pair) for pair in zip(stores, tasks, strict=True)]
            for thread in threads:
                thread.start()
            _until(lambda: _lock_waiters(watcher) == 2)
            holder.rollback()
            for thread in threads:
                thread.join(60)
        assert errors == []
    finally:
        holder.close()
        watcher.close()
    child = {s.name: s for s in handle.status().steps}["child"]
    assert (child.state, child.waiting_on) == ("ready", 0)


def test_requeueing_a_dead_parent_of_a_wide_fan_in_counts_its_shard_again(app, db, shards):
    ran: list[str] = []
    fail = {"boom": True}

    @app.task(name="flaky", max_attempts=1)
    def flaky() -> None:
        if fail["boom"]:
            raise RuntimeError("not yet")
        ran.append("flaky")

    @app.task(name="member")
    def member(n: int) -> None:
        ran.append(f"m{n}")

    wf = app.workflow("resumed")
    parents = [wf.add(member.step(n=i), name=f"m{i}") for i in range(4)]
    parents.append(wf.add(flaky.step(), name="flaky"))
    wf.add(member.step(n=99), name="fan-in", after=parents)
    handle = wf.enqueue()
    app.work(until_empty=True)
    assert handle.status().state == "failed" and "m99" not in ran
    fail["boom"] = False
    assert admin.dead_requeue(db.store, "default", [handle.task_ids["flaky"]]).requeued == 1
    fan_in = {s.name: s for s in handle.status().steps}["fan-in"]
    assert (fan_in.state, fan_in.waiting_on) == ("waiting", 1)  # only the requeued parent is missing
    rows = db.workflow_counts()
    assert sorted(r["waiting_on"] for r in rows) == [0, 1]
    app.work(until_empty=True)
    assert ran[-2:] == ["flaky", "m99"] and handle.status().state == "succeeded"


def test_pruning_a_finished_wide_fan_in_deletes_its_shard_rows_with_it(app, db, shards):
    @app.task(name="t")
    def t(n: int) -> None: ...

    wf = app.workflow("pruned")
    wf.add(t.step(n=0), after=wf.group(*[t.step(n=i) for i in range(1, 5)]))
    handle = wf.enqueue()
    app.work(until_empty=True)
    assert len(db.workflow_counts()) == 2
    assert prune_workflows(db.store, keep_seconds=0.0).pruned == 1
    assert len(db.workflow_counts()) == 0
    assert db.client.workflow_status(handle).state == "unknown"


def test_a_member_of_a_wide_fan_in_keeps_its_shard_and_the_fan_in_its_name():
    wide = tuple(f"p{i}" for i in range(5))
    counts = fan_in_counts(
        [*(_spec(p) for p in wide), _spec("wide", wide), _spec("after", ("p0",))],
        lambda parents: 2 if parents >= 5 else 0,
    )
    # p0 also has an own-row child: its shard is read through its edges, as before
    assert counts.only_shard == {"p1": 1, "p2": 0, "p3": 1, "p4": 0}
    assert all(counts.only_child[p] == "wide" for p in counts.only_shard) and counts.only_child["p0"] == "after"


def test_an_ack_of_wide_fan_in_members_counts_their_shards_off_by_name_grouped_in_one_statement():
    from tests.support.plans import drive, names

    w = uuid.uuid4()
    finished: list[FinishedStep] = [(w, f"m{i}", IN_SHARDS, "wide") for i in range(5)]
    _, sent = drive(workflows._advance(finished, {(w, f"m{i}"): i % 2 for i in range(5)}))
    assert names(sent) == ["workflow_counts_count_off"]  # no edge read
    params = sent[0].params
    assert sorted(zip(params["workflow_ids"], params["children"], params["shards"], params["counts"])) == [
        (w, "wide", 0, 3),
        (w, "wide", 1, 2),
    ]
    # One parent without its shard (a row written before migration 0020, or several children):
    # every parent of the ack through the edges, so that shard rows are locked by one statement.
    _, sent = drive(workflows._advance(finished, {(w, f"m{i}"): i % 2 for i in range(4)}))
    assert names(sent) == ["workflow_counts_advance"] and sorted(sent[0].params["steps"]) == [f"m{i}" for i in range(5)]


def test_steps_written_without_their_shard_still_release_a_wide_fan_in_through_the_edges(app, db, shards):
    ran: list[str] = []

    @app.task(name="member")
    def member(n: int) -> None:
        ran.append(f"m{n}")

    @app.task(name="callback")
    def callback() -> None:
        ran.append("callback")

    wf = app.workflow("before-0020")
    wf.add(callback.step(), after=wf.group(*[member.step(n=i) for i in range(6)]), name="fan-in")
    handle = wf.enqueue()
    assert len(db.steps_with_a_shard()) == 6
    # As rows written before the column: three members keep no shard (mixed in their acks).
    db.forget_shards(handle, 3)
    app.work(until_empty=True)
    assert sorted(ran[:6]) == [f"m{i}" for i in range(6)] and ran[6:] == ["callback"]
    assert handle.status().state == "succeeded"
