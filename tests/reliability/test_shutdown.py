"""Graceful shutdown of a real ``shardq work`` process: SIGTERM hands unstarted tasks back at
once (ready, attempt refunded, no wait for the lease) and lets running handlers finish within
the grace period, then exits 0."""

from __future__ import annotations

import re
import signal

from tests.reliability.harness import HANDLER, Processes, read_executions, wait_until

HOLD = "tests.reliability.crash_handlers:hold"


def _handed_back(output: str) -> int:
    """The worker's own count of tasks it handed back (its summary line)."""
    found = re.search(r"handed back (\d+)", output)
    return int(found.group(1)) if found else -1


def _states(db) -> dict[str, int]:
    return db.count_by_state()


def test_sigterm_hands_back_unstarted_tasks_at_once_and_lets_running_ones_finish(pg_db, tmp_path, figures):
    total = 40
    pg_db.client.enqueue_many("q", [b"t"] * total)
    gates = tmp_path / "gates"
    gates.mkdir()
    out = tmp_path / "records"
    procs = Processes(pg_db.dsn.conninfo, out, extra_env={"SHARDQ_REL_HOLD": str(gates)})
    # A lease of 300 s: anything back in the queue before the process exits was handed back, not reaped.
    worker = procs.start(
        "worker",
        ["work", "q", "--handler", HOLD, "--concurrency", "3", "--batch", "10", "--lease", "300", "--grace", "60"],
    )
    try:
        wait_until(lambda: len(read_executions(out)) == 3, 60, what="three handlers to start")
        claimed = wait_until(lambda: _states(pg_db).get("leased", 0), 10, what="leased rows")
        worker.popen.send_signal(signal.SIGTERM)
        # The three running handlers are still blocked; everything else must be ready again already.
        wait_until(
            lambda: _states(pg_db) == {"ready": total - 3, "leased": 3},
            30,
            what="unstarted tasks to be handed back while handlers still run",
        )
        running_alive = worker.poll() is None
        (gates / "all").touch()
        exit_code = worker.popen.wait(60)
    finally:
        (gates / "all").touch()
        procs.terminate_all()
    rows = pg_db.tasks("state", "attempts", "lease_token")
    runs = read_executions(out)
    finished = sum(1 for task_runs in runs.values() for r in task_runs if r.finished is not None)
    refunded = sum(1 for r in rows if r["attempts"] == 0 and r["lease_token"] is None and r["state"] == "ready")
    output = worker.log.read_text()
    figures.add(
        "shutdown",
        scenario="SIGTERM with 3 handlers blocked (lease 300 s, grace 60 s)",
        claimed=claimed,
        running=3,
        finished=finished,
        handed_back=_handed_back(output),
        refunded=refunded,
        exit_code=exit_code,
    )
    assert running_alive, "the worker left before its running handlers finished"
    assert exit_code == 0, output
    assert finished == 3 and len(runs) == 3
    assert len(rows) == total - 3 and refunded == total - 3
    assert "processed 3" in output and f"handed back {claimed - 3}" in output


def test_sigterm_during_a_drain_leaves_no_task_leased_or_half_run(pg_db, tmp_path, figures):
    total = 300
    pg_db.client.enqueue_many("q", [b"ok"] * total)
    out = tmp_path / "records"
    procs = Processes(pg_db.dsn.conninfo, out, extra_env={"SHARDQ_REL_SLEEP_MS": "100"})
    worker = procs.start(
        "worker",
        ["work", "q", "--handler", HANDLER, "--concurrency", "4", "--batch", "20", "--lease", "300", "--grace", "60"],
    )
    try:
        wait_until(
            lambda: sum(1 for rs in read_executions(out).values() for r in rs if r.finished) >= 30,
            120,
            what="the drain to get going",
        )
        worker.popen.send_signal(signal.SIGTERM)
        exit_code = worker.popen.wait(90)
    finally:
        procs.terminate_all()
    runs = read_executions(out)
    cut_short = [r for rs in runs.values() for r in rs if r.finished is None]
    rows = pg_db.tasks("state", "attempts")
    states = {r["state"] for r in rows}
    output = worker.log.read_text()
    figures.add(
        "shutdown",
        scenario="SIGTERM during a drain (100 ms handlers, concurrency 4)",
        claimed=len(runs) + max(0, _handed_back(output)),
        running="-",
        finished=len(runs) - len(cut_short),
        handed_back=_handed_back(output),
        refunded=sum(1 for r in rows if r["attempts"] == 0),
        exit_code=exit_code,
    )
    assert exit_code == 0, worker.log.read_text()
    assert not cut_short, "a handler was cut short by a graceful stop"
    assert len(rows) + len(runs) == total  # every task either ran (and was acked) or waits, untouched
    assert states <= {"ready"} and all(r["attempts"] == 0 for r in rows)


def test_a_second_grace_expiry_hands_running_tasks_back_too(pg_db, tmp_path, figures):
    pg_db.client.enqueue_many("q", [b"t"] * 5)
    gates = tmp_path / "gates"
    gates.mkdir()
    out = tmp_path / "records"
    procs = Processes(pg_db.dsn.conninfo, out, extra_env={"SHARDQ_REL_HOLD": str(gates)})
    worker = procs.start(
        "worker",
        ["work", "q", "--handler", HOLD, "--concurrency", "2", "--batch", "5", "--lease", "300", "--grace", "0.5"],
    )
    try:
        wait_until(lambda: len(read_executions(out)) == 2, 60, what="two handlers to start")
        worker.popen.send_signal(signal.SIGTERM)
        exit_code = worker.popen.wait(60)
    finally:
        (gates / "all").touch()
        procs.terminate_all()
    rows = pg_db.tasks("state", "attempts", "lease_token")
    refunded = sum(1 for r in rows if r["state"] == "ready" and r["attempts"] == 0 and r["lease_token"] is None)
    figures.add(
        "shutdown",
        scenario="SIGTERM with handlers blocked past a 0.5 s grace period",
        claimed=5 - sum(1 for r in rows if r["attempts"] == 0) + _handed_back(worker.log.read_text()),
        running=2,
        finished=0,
        handed_back=_handed_back(worker.log.read_text()),
        refunded=refunded,
        exit_code=exit_code,
    )
    assert exit_code == 0, worker.log.read_text()
    assert len(rows) == 5 and refunded == 5  # running ones handed back too, not left to lease expiry
