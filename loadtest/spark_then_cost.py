"""``python -m loadtest.spark_then_cost [--tasks N] [--rounds R]``: what ``then=`` costs the
burn-down of a Spark run's tasks (shardq.workflows.spark_callbacks), on one embedded PostgreSQL.

Each cell is a fresh database: ``defer_many`` of N no-op calls (batches of 1,000), then
``app.work(until_empty=True)``, timed. ``plain``: the tasks as a run without ``then=`` leaves them.
``then``: the same tasks carry a run's mark, as the Spark writers write them (set by one UPDATE
and a VACUUM before the clock starts), the run has a callback and is complete; the burn-down ends
with the callback run once. Cells alternate within a round; the verdict is the median of
then / plain over rounds. Then the probe's worst case: a run of N marked tasks of which N-1 were
deleted one transaction at a time as acks delete them (no VACUUM in between), timed with one
task left (``spark_callback_due`` through EXPLAIN ANALYZE). Last, what the partial index costs a
task without a mark (:func:`_plain_insert_with_and_without_the_index`). Prints one JSON document.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import time

import psycopg

from loadtest.env import Bench, vacuum_analyze


def _cell(url: str, tasks: int, then: bool) -> dict:
    import shardq
    from shardq.workflows import spark_callbacks as run_callbacks

    app = shardq.App(url)

    @app.task(name="bench.noop", queue="bench")
    def noop(n: int) -> None: ...

    ran: list[int] = []

    @app.task(name="bench.done", queue="bench")
    def done() -> None:
        ran.append(1)

    for start in range(0, tasks, 1000):
        noop.defer_many([{"n": i} for i in range(start, min(tasks, start + 1000))])
    if then:
        session = app.client.store.session
        callback = session.run(run_callbacks.register_plan("bench-run", done.step()))
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "UPDATE shardq_tasks SET workflow_id = %s WHERE queue = 'bench' AND state = 'ready'", (callback.mark,)
            )
        session.run(run_callbacks.complete_plan("bench-run"))
    vacuum_analyze(url)
    started = time.perf_counter()
    totals = app.work(until_empty=True)
    seconds = time.perf_counter() - started
    app.close()
    assert totals.acked == tasks + (1 if then else 0), totals
    assert ran == ([1] if then else []), ran
    return {"then": then, "tasks": tasks, "seconds": round(seconds, 3), "per_second": round(tasks / seconds)}


def _probe_worst_case(url: str, tasks: int) -> dict:
    import shardq
    from shardq.workflows import spark_callbacks as run_callbacks

    app = shardq.App(url)

    @app.task(name="bench.noop", queue="bench")
    def noop(n: int) -> None: ...

    @app.task(name="bench.done", queue="bench")
    def done() -> None: ...

    for start in range(0, tasks, 1000):
        noop.defer_many([{"n": i} for i in range(start, min(tasks, start + 1000))])
    callback = app.client.store.session.run(run_callbacks.register_plan("probe-run", done.step()))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE shardq_tasks SET workflow_id = %s WHERE queue = 'bench' AND state = 'ready'", (callback.mark,)
        )
        conn.execute("VACUUM ANALYZE shardq_tasks")
        ids = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM shardq_tasks WHERE workflow_id = %s ORDER BY exec_time, id", (callback.mark,)
            )
        ]
        for start in range(0, len(ids) - 1, 100):  # acks of 100, in claim order
            conn.execute("DELETE FROM shardq_tasks WHERE id = ANY(%s)", (ids[start : min(start + 100, len(ids) - 1)],))
        conn.execute("UPDATE shardq_spark_callbacks SET complete = true")
        due = app.client.store.session.engine.statements()["spark_callback_due"].text
        timings = []
        for _ in range(5):
            plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + due, {"marks": [callback.mark]}).fetchone()[0][0]
            timings.append(plan["Execution Time"])
    app.close()
    return {
        "tasks": tasks,
        "left": 1,
        "probe_ms_first": round(timings[0], 3),
        "probe_ms_median_of_next_4": round(statistics.median(timings[1:]), 3),
    }


# The predicate of the index as migration 0019 creates it (its module's name starts with a digit).
_RUN_MARK = importlib.import_module("shardq.migrations.versions.0019_tasks_by_run").RUN_MARK


def _plain_insert_with_and_without_the_index(url: str, alternations: int = 6) -> dict:
    """What the partial index costs a task without a mark: the server's time for one INSERT of
    20,000 plain task rows (rolled back), with and without ``shardq_tasks_by_run`` (migration 0019)."""
    times: dict[bool, list[float]] = {True: [], False: []}
    insert = (
        "EXPLAIN (ANALYZE, FORMAT JSON) INSERT INTO shardq_tasks (state, rank, queue, exec_time, id, priority,"
        " attempts, max_attempts, payload) SELECT 'ready', 0, 'bench', now(), gen_random_uuid(), 0, 0, 25,"
        " '\\x0102'::bytea FROM generate_series(1, 20000)"
    )
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO shardq_queues (name) VALUES ('bench') ON CONFLICT DO NOTHING")
        for i in range(2 * alternations):
            index = i % 2 == 0
            if index:
                conn.execute(
                    f"CREATE INDEX IF NOT EXISTS shardq_tasks_by_run ON shardq_tasks (workflow_id) WHERE {_RUN_MARK}"
                )
            else:
                conn.execute("DROP INDEX IF EXISTS shardq_tasks_by_run")
            conn.execute("BEGIN")
            plan = conn.execute(insert).fetchone()[0][0]
            conn.execute("ROLLBACK")
            times[index].append(round(plan["Execution Time"], 1))
    return {
        "with_index_ms": times[True],
        "without_index_ms": times[False],
        "median_ratio": round(statistics.median(times[True]) / statistics.median(times[False]), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    bench = Bench.start()
    try:
        cells = []
        for round_ in range(args.rounds):
            for then in (False, True) if round_ % 2 == 0 else (True, False):
                url = bench.shardq_database("then" if then else "plain")
                cells.append(_cell(url, args.tasks, then))
                bench.drop(url)
        ratios = [
            t["seconds"] / p["seconds"]
            for p, t in zip([c for c in cells if not c["then"]], [c for c in cells if c["then"]], strict=True)
        ]
        url = bench.shardq_database("probe")
        probe = _probe_worst_case(url, args.tasks)
        bench.drop(url)
        url = bench.shardq_database("insert")
        insert = _plain_insert_with_and_without_the_index(url)
        bench.drop(url)
        print(
            json.dumps(
                {
                    "cells": cells,
                    "then_over_plain_median": round(statistics.median(ratios), 3),
                    "probe_worst_case": probe,
                    "plain_insert": insert,
                },
                indent=2,
            )
        )
    finally:
        bench.close()


if __name__ == "__main__":
    main()
