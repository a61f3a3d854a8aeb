"""The crash suites' kill hooks (tests.reliability.chaos): each moment a worker reaches kills it.

A hook that never fires leaves its moment untested while the suite still passes: the claim
moments wrapped store methods the worker no longer called, and no crash round ever died in a
claim (docs/reliability.md's kills by moment had no claim rows).
"""

from __future__ import annotations

import pytest

from shardq import NewTask
from tests.reliability.harness import HANDLER, Processes

WORKER_MOMENTS = ["handler", "claim-during", "claim-after", "ack-before", "ack-during", "ack-after"]


@pytest.mark.parametrize("moment", WORKER_MOMENTS)
def test_a_worker_armed_for_a_moment_dies_of_sigkill_when_it_reaches_it(pg_db, tmp_path, moment):
    queue = f"hook-{moment}"
    pg_db.client.enqueue_many(queue, [NewTask(b"ok") for _ in range(6)])
    procs = Processes(pg_db.dsn.conninfo, tmp_path)
    # --until-empty: a worker whose hook does not fire drains the queue and exits 0.
    proc = procs.start(
        "worker", ["work", queue, "--handler", HANDLER, "--batch", "3", "--until-empty"], kill_hook=f"{moment}:1"
    )
    try:
        returncode = proc.popen.wait(timeout=60)
    finally:
        procs.terminate_all()
    assert returncode == -9, (moment, returncode, proc.log.read_text(errors="replace")[-600:])
