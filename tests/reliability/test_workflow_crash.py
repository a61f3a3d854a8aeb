"""Workflows under SIGKILL: real ``shardq work --app`` processes killed around the acks that
release steps (before, during, after the ack's statement, mid-handler, right after a claim, and
after an ack took the next steps of chains, before they ran).

Promise under test (shardq.workflows.steps): every workflow finishes with every step succeeded; no step
starts before each of its parents finished once; a step runs more than once only after an
expired lease (its worker was killed, or it logged the lease as lost), never because two parents'
acks released it twice; nothing is left waiting or leased.
"""

from __future__ import annotations

import random
import time
import uuid

import pytest

import shardq
from shardq.engine import base as engine_base
from shardq.engine.postgresql import PostgreSQLEngine
from tests.reliability.harness import Processes, account, lease_lost_reports, read_executions

MOMENTS = ["ack-before", "take-before", "ack-during", "ack-after", "handler", "claim-after", "ack-during"]
APP = "tests.reliability.workflow_app:app"
QUEUE = "wfcrash"
DEADLINE = 90.0


def _worker(procs: Processes, rng: random.Random, hook: str | None):
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


def _enqueue(app: shardq.App, n: int) -> list:
    """``n`` workflows: a group of three into a fan-in, then a chain of two after it."""
    step = app.tasks["reliability.step"]
    handles = []
    for i in range(n):
        wf = app.workflow(f"crash-{i}")
        members = wf.group(*[step.step(label=f"{i}.m{j}") for j in range(3)])
        fan_in = wf.add(step.step(label=f"{i}.fan"), after=members, name="fan")
        wf.chain(step.step(label=f"{i}.c1"), step.step(label=f"{i}.c2"), after=fan_in)
        handles.append(wf.enqueue())
    return handles


@pytest.mark.parametrize(
    "rounds,workflows,shards",
    [
        pytest.param(3, 8, False, id="fast"),
        pytest.param(3, 8, True, id="fast-shards"),
        pytest.param(12, 20, False, id="full", marks=pytest.mark.slow),
        pytest.param(12, 20, True, id="full-shards", marks=pytest.mark.slow),
    ],
)
def test_killed_workers_release_every_step_once_and_after_all_its_parents(
    pg_db, tmp_path, figures, monkeypatch, rounds, workflows, shards
):
    from tests.reliability.workflow_app import app

    if shards:
        # Each fan-in of three counts its parents in two shard rows (decided at enqueue, in this
        # process; the workers' acks follow the edges): the shard path under the same kills.
        monkeypatch.setattr(PostgreSQLEngine, "fan_in_shard_from", 3)
        monkeypatch.setattr(engine_base, "FAN_IN_SHARDS", 2)

    app._dsn = pg_db.dsn  # the module's app reads $SHARDQ_DSN in the workers; here, the test database
    seed = uuid.uuid4().int % 10_000
    rng = random.Random(seed)
    problems: list[str] = []
    kills = 0
    try:
        for number in range(rounds):
            out = tmp_path / f"round{number}"
            handles = _enqueue(app, workflows)
            if shards:
                assert len(pg_db.workflow_counts()) >= 2 * workflows
            procs = Processes(pg_db.dsn.conninfo, out)
            live = [
                _worker(procs, rng, f"{MOMENTS[(2 * number + i) % len(MOMENTS)]}:{rng.randint(1, 3)}") for i in range(2)
            ]
            reaper = pg_db.client.reaper()
            started = time.monotonic()
            while time.monotonic() - started < DEADLINE:
                states = {app.workflow_status(h).state for h in handles}
                if states == {"succeeded"}:
                    break
                reaper.run_once()
                live = [p for p in live if p.poll() is None]
                while len(live) < 2:
                    live.append(_worker(procs, rng, None))
                time.sleep(0.1)
            procs.terminate_all()
            reaper.store.session.close()
            kills += len(procs.killed_pids())
            problems += _check(pg_db, handles, app, out, procs, f"round {number} (seed {seed})")
            figures.add(
                "workflow-crash",
                round=number,
                seed=seed,
                workflows=workflows,
                steps=6 * workflows,
                kills=len(procs.killed_pids()),
                seconds=time.monotonic() - started,
            )
    finally:
        app.close()
    assert not problems, "\n".join(problems[:20])
    assert kills >= rounds, "the kill hooks did not fire: the suite tested nothing"


def _check(db, handles, app, out, procs, where: str) -> list[str]:
    problems: list[str] = []
    runs = read_executions(out)
    task_ids = {task_id for h in handles for task_id in h.task_ids.values()}
    remaining = set(db.task_ids(QUEUE))
    accounting = account(
        dict.fromkeys(task_ids, False),
        runs,
        remaining=remaining & task_ids,
        dead=set(),
        killed_pids=procs.killed_pids(),
        lease_lost=lease_lost_reports(procs.logs()),
    )
    problems += [f"{where}: {p}" for p in accounting.problems()]
    for handle in handles:
        status = app.workflow_status(handle)
        if status.state != "succeeded":
            problems.append(
                f"{where}: workflow {handle} is {status.state}: "
                + ", ".join(f"{s.name}={s.state}" for s in status.steps)
            )
            continue
        for step in status.steps:
            first_start = min(r.started for r in runs[step.task_id])
            for parent in step.parents:
                finished = [r.finished for r in runs[handle.task_ids[parent]] if r.finished is not None]
                if not finished or first_start < min(finished):
                    problems.append(
                        f"{where}: step {step.name} of {handle} started before its parent {parent} finished"
                    )
    return problems
