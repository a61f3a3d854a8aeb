"""While a worker runs, the garbage collector's youngest generation is collected once the worker
has turned its in-flight tasks over many times, not several times per ack of a batch of chain
steps (shardq.worker.collector): the threshold is only raised, never lowered, and comes back when
the last worker of the process stops."""

from __future__ import annotations

import gc

import pytest

import shardq
from shardq.worker import collector
from shardq.worker.config import WorkerConfig


@pytest.fixture
def threshold():
    """The collector's thresholds, put back after the test whatever it set."""
    before = gc.get_threshold()
    yield before
    gc.set_threshold(*before)


def _config(**options) -> WorkerConfig:
    return WorkerConfig(queues=("q",), **options)


def test_the_threshold_covers_a_hundred_allocations_per_task_the_worker_may_hold():
    # concurrency 4 + prefetch (= batch 100) + ack_batch 1000 tasks held at most
    assert collector.young_threshold(_config()) == 100 * (4 + 100 + 1000)
    assert collector.young_threshold(_config(concurrency=8, batch=50, prefetch=10, ack_batch=200)) == 100 * 218


def test_a_worker_raises_the_youngest_threshold_while_it_runs_and_puts_it_back(threshold):
    gc.set_threshold(700, 10, 10)
    with collector.paced(_config()):
        assert gc.get_threshold() == (collector.young_threshold(_config()), 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_a_higher_threshold_or_an_automatic_collection_turned_off_is_kept(threshold):
    for young in (10**7, 0):
        gc.set_threshold(young, 5, 5)
        with collector.paced(_config()):
            assert gc.get_threshold() == (young, 5, 5)
        assert gc.get_threshold() == (young, 5, 5)


def test_with_gc_tuning_off_the_collector_is_left_alone(threshold):
    gc.set_threshold(700, 10, 10)
    with collector.paced(_config(gc_tuning=False)):
        assert gc.get_threshold() == (700, 10, 10)


def test_the_threshold_comes_back_only_when_the_last_worker_of_the_process_stops(threshold):
    gc.set_threshold(700, 10, 10)
    raised = collector.young_threshold(_config())
    first, second = collector.paced(_config()), collector.paced(_config())
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert gc.get_threshold()[0] == raised  # the second worker still runs
    second.__exit__(None, None, None)
    assert gc.get_threshold()[0] == 700


def test_a_threshold_changed_while_the_worker_ran_is_kept(threshold):
    gc.set_threshold(700, 10, 10)
    with collector.paced(_config()):
        gc.set_threshold(5000, 10, 10)  # the application's own choice, made meanwhile
    assert gc.get_threshold() == (5000, 10, 10)


def test_a_running_worker_handles_tasks_under_the_raised_threshold_and_restores_it(db, threshold):
    gc.set_threshold(700, 10, 10)
    seen: list[int] = []
    app = shardq.App(db.dsn)
    try:

        @app.task(name="look", queue="q")
        def look() -> None:
            seen.append(gc.get_threshold()[0])

        look.defer()
        app.work(until_empty=True)
        look.defer()
        app.work(until_empty=True, gc_tuning=False)
    finally:
        app.close()
    assert seen == [collector.young_threshold(_config()), 700]
    assert gc.get_threshold() == (700, 10, 10)


def _young_collections_working_chains(dsn: str, **options) -> int:
    """Young-generation collections while a worker works off 200 chains of 10 steps (each step
    after a chain's first taken by the ack of the one before it, in batches)."""
    app = shardq.App(dsn)
    collections = [0]

    def count(phase: str, info: dict) -> None:
        if phase == "start" and info["generation"] == 0:
            collections[0] += 1

    try:

        @app.task(name="link", queue="q")
        def link(c: int, i: int) -> None:
            pass

        for c in range(200):
            wf = app.workflow(f"chain-{c}")
            wf.chain(*[link.step(c=c, i=i) for i in range(10)])
            wf.enqueue()
        gc.callbacks.append(count)
        try:
            totals = app.work(until_empty=True, **options)
        finally:
            gc.callbacks.remove(count)
        assert totals.acked == 2000 and totals.taken > 1000
    finally:
        app.close()
    return collections[0]


def test_a_worker_taking_chain_steps_in_batches_sets_off_few_young_collections(pg_db, threshold):
    gc.set_threshold(700, 10, 10)
    untuned = _young_collections_working_chains(pg_db.dsn, gc_tuning=False)
    tuned = _young_collections_working_chains(pg_db.dsn)
    # At the default threshold each ack of a batch of steps sets off several collections while
    # hundreds of tasks are in flight (each one promotes them); raised, hardly any runs at all.
    assert untuned >= 10
    assert tuned <= 2
