"""Spark ``then=`` under SIGKILL: real ``shardq work --app`` processes killed around the acks of a
run's tasks (before, during, after the ack's statement, mid-handler, right after a claim).

Promise under test (shardq.workflows.spark_callbacks): every run's callback runs, once, after every task of
the run finished; a second execution only after an expired lease (its worker was killed, or it
logged the lease as lost), never because two acks released it twice; nothing is left waiting or
leased. The runs' tasks are marked as the Spark writers mark them (the writers are not what is
under test here: tests/spark/test_then.py runs them).
"""

from __future__ import annotations

import random
import time
import uuid

import pytest

import shardq
from shardq.workflows import spark_callbacks as run_callbacks
from tests.reliability.harness import Processes, account, lease_lost_reports, read_executions

MOMENTS = ["ack-during", "ack-before", "ack-after", "handler", "claim-after", "ack-during"]
APP = "tests.reliability.workflow_app:app"
QUEUE = "wfcrash"
DEADLINE = 90.0


def _enqueue(
    app: shardq.App, db, runs: int, tasks: int, tag: str
) -> list[tuple[str, run_callbacks.Callback, list[str]]]:
    step = app.tasks["reliability.step"]
    made = []
    for i in range(runs):
        run_id = f"{tag}-{i}"
        callback = db.session.run(run_callbacks.register_plan(run_id, step.step(label=f"{run_id}.done")))
        ids = [str(h) for h in step.defer_many([{"label": f"{run_id}.t{j}"} for j in range(tasks)])]
        db.mark_workflow(ids, callback.mark)
        db.session.run(run_callbacks.complete_plan(run_id))
        made.append((run_id, callback, ids))
    return made


@pytest.mark.parametrize(
    "rounds,runs,tasks", [pytest.param(3, 4, 6, id="fast"), pytest.param(10, 8, 12, id="full", marks=pytest.mark.slow)]
)
def test_killed_workers_run_each_callback_once_after_every_task_of_its_run(
    pg_db, tmp_path, figures, rounds, runs, tasks
):
    from tests.reliability.workflow_app import app

    app._dsn = pg_db.dsn  # the module's app reads $SHARDQ_DSN in the workers; here, the test database
    seed = uuid.uuid4().int % 10_000
    rng = random.Random(seed)
    problems: list[str] = []
    kills = 0
    try:
        for number in range(rounds):
            out = tmp_path / f"round{number}"
            made = _enqueue(app, pg_db, runs, tasks, f"r{number}")
            procs = Processes(pg_db.dsn.conninfo, out)

            def worker(hook: str | None, procs: Processes = procs):
                return procs.start(
                    "worker",
                    [
                        "work",
                        "--app",
                        APP,
                        "--concurrency",
                        str(rng.randint(2, 3)),
                        "--batch",
                        str(rng.randint(2, 6)),
                        "--lease",
                        "1",
                    ],
                    kill_hook=hook,
                )

            live = [worker(f"{MOMENTS[(2 * number + i) % len(MOMENTS)]}:{rng.randint(1, 3)}") for i in range(2)]
            reaper = pg_db.client.reaper()
            started = time.monotonic()
            while time.monotonic() - started < DEADLINE:
                states = {app.workflow_status(cb.workflow_id).state for _, cb, _ids in made}
                if states == {"succeeded"}:
                    break
                reaper.run_once()
                live = [p for p in live if p.poll() is None]
                while len(live) < 2:
                    live.append(worker(None))
                time.sleep(0.1)
            procs.terminate_all()
            reaper.store.session.close()
            kills += len(procs.killed_pids())
            problems += _check(pg_db, app, made, out, procs, f"round {number} (seed {seed})")
            figures.add(
                "spark-then-crash",
                round=number,
                seed=seed,
                runs=runs,
                tasks=runs * (tasks + 1),
                kills=len(procs.killed_pids()),
                seconds=time.monotonic() - started,
            )
    finally:
        app.close()
    assert not problems, "\n".join(problems[:20])
    assert kills >= rounds, "the kill hooks did not fire: the suite tested nothing"


def _check(db, app, made, out, procs, where: str) -> list[str]:
    problems: list[str] = []
    executions = read_executions(out)
    task_ids: set[str] = set()
    for run_id, callback, ids in made:
        task_ids |= set(ids)
        status = app.workflow_status(callback.workflow_id)
        if status.state != "succeeded":
            problems.append(f"{where}: the callback of {run_id} is {status.state}")
            continue
        callback_id = status.steps[0].task_id
        task_ids.add(callback_id)
        finished = [
            min((r.finished for r in executions.get(i, []) if r.finished is not None), default=None) for i in ids
        ]
        starts = [r.started for r in executions.get(callback_id, [])]
        if None in finished or not starts:
            continue  # reported as lost by the accounting below
        if min(starts) < max(f for f in finished if f is not None):
            problems.append(f"{where}: the callback of {run_id} started before every task of the run finished")
    remaining = set(db.task_ids(QUEUE))
    accounting = account(
        dict.fromkeys(task_ids, False),
        executions,
        remaining=remaining,
        dead=set(),
        killed_pids=procs.killed_pids(),
        lease_lost=lease_lost_reports(procs.logs()),
    )
    problems += [f"{where}: {p}" for p in accounting.problems()]
    return problems
