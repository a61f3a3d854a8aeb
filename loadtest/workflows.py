"""``python -m loadtest.workflows [--steps N] [--chains M] [--rounds R]``: what a workflow step
costs against a plain task, and how soon a fan-in runs after its last parent's ack (issue #32).

Three kinds of run, each its own process on a fresh database of one embedded PostgreSQL, each
enqueueing N no-op calls of one app task and working them off with ``app.work(until_empty=True)``
(one worker, its default threads):

* ``plain``: N plain tasks (``defer_many``, batches of 1,000);
* ``fan``: one workflow, a group of N - 1 steps fanning in to one callback step (on PostgreSQL
  counted in the fan-in's own row);
* ``fan-shards``: the same, with the fan-in counted in shard rows as CockroachDB counts a fan-in
  that wide (docs/workflows.md, "Fan-in in shards"): ``fan_shards_over_fan`` is what the shards
  would cost on PostgreSQL, within each round;
* ``chains``: M workflows, each a chain of N / M steps (10 by default);
* ``fan-listen``: the ``fan`` run worked by a worker as deployed (not ``until_empty``: idle, it
  waits for wake-ups over LISTEN/NOTIFY with a growing pause), stopped once the fan-in ran; its
  CPU includes that idle wait, read only its release delay.

For the work phase (enqueue excluded, and the status read that follows it) it measures the
worker process's CPU (all its threads) and the database server's CPU (every backend), each per
task; ``*_over_plain`` are ratios within one round (goal: a step at most 1.5x a plain task). For
``fan`` it also measures the fan-in's release delay: from the commit of the ack that released it
(the server runs with ``track_commit_timestamp``; the callback reads its step row's commit time)
and from the last parent's handler returning, to the callback's handler starting. Each round runs the kinds in the order above and then reversed; the
figures are medians over the rounds.
Nothing asserts: goals are judged by reading the report (docs/workflows.md, "Costs").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KINDS = ("plain", "fan", "fan-shards", "chains", "fan-listen")


def one(url: str, kind: str, steps: int, chains: int, gc_tuning: bool = True) -> dict:
    """One run in this process: enqueue, then (after a line on stdin, so the caller can read the
    server's CPU between the phases) work them off; returns the figures."""
    import shardq
    from loadtest.env import step_released_at
    from shardq.engine import base as engine_base
    from shardq.engine.postgresql import PostgreSQLEngine

    if kind == "fan-shards":  # this process only: the fan-in is counted in shards, as on CockroachDB
        PostgreSQLEngine.fan_in_shard_from = engine_base.FAN_IN_SHARD_FROM
    app = shardq.App(url)
    ends: list[float] = []
    callback_started: list[float] = []
    released: list[float] = []
    called = threading.Event()

    @app.task(name="bench.noop", queue="bench")
    def noop(n: int) -> None:
        ends.append(time.time())

    @app.task(name="bench.callback", queue="bench")
    def callback() -> None:
        callback_started.append(time.time())
        released.append(step_released_at(url, "fan-in"))
        called.set()

    started = time.perf_counter()
    handles = []
    if kind == "plain":
        for start in range(0, steps, 1000):
            noop.defer_many([{"n": i} for i in range(start, min(steps, start + 1000))])
    elif kind in ("fan", "fan-shards", "fan-listen"):
        wf = app.workflow("fan")
        members = wf.group(*[noop.step(n=i) for i in range(steps - 1)])
        wf.add(callback.step(), after=members, name="fan-in")
        handles.append(wf.enqueue())
    else:
        length = steps // chains
        for c in range(chains):
            wf = app.workflow(f"chain-{c}")
            wf.chain(*[noop.step(n=c * length + i) for i in range(length)])
            handles.append(wf.enqueue())
    enqueued = time.perf_counter() - started
    print("enqueued", flush=True)
    sys.stdin.readline()
    cpu, started = time.process_time(), time.perf_counter()
    if kind == "fan-listen":
        worker = app.client.worker(["bench"], app, gc_tuning=gc_tuning)
        running = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
        running.start()
        assert called.wait(600), "the fan-in never ran"
        worker.stop()
        running.join()
        totals = worker.totals
    else:
        totals = app.work(until_empty=True, gc_tuning=gc_tuning)
    worked, cpu = time.perf_counter() - started, time.process_time() - cpu
    app.close()  # its server processes end: the caller reads the server's CPU before the reads below
    print("worked", flush=True)
    sys.stdin.readline()
    assert totals.acked == steps, totals
    out = {"kind": kind, "steps": steps, "enqueue_s": enqueued, "work_s": worked, "client_cpu_s": cpu}
    if kind in ("fan", "fan-shards", "fan-listen"):
        app = shardq.App(url)
        status = app.workflow_status(handles[0])
        assert status.state == "succeeded", status.state
        out["release_after_ack_ms"] = (callback_started[0] - released[0]) * 1e3
        out["release_after_handler_ms"] = (callback_started[0] - max(ends)) * 1e3
    app.close()
    return out


def _run(url: str, kind: str, steps: int, chains: int, server_cpu, gc_tuning: bool = True) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(REPO)]))
    args = [
        sys.executable,
        "-m",
        "loadtest.workflows",
        "--one",
        url,
        "--kind",
        kind,
        "--steps",
        str(steps),
        "--chains",
        str(chains),
    ] + ([] if gc_tuning else ["--no-gc-tuning"])
    with subprocess.Popen(args, cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        assert proc.stdout.readline().strip() == "enqueued"
        before = server_cpu()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "worked"
        after = server_cpu()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        last = proc.stdout.read().strip().splitlines()[-1]
    if proc.returncode:
        raise RuntimeError(f"{kind} run failed ({proc.returncode})")
    out = json.loads(last)
    out["server_cpu_s"] = after - before
    out["client_cpu_ms_per_task"] = out["client_cpu_s"] / steps * 1e3
    out["server_cpu_ms_per_task"] = out["server_cpu_s"] / steps * 1e3
    out["cpu_ms_per_task"] = out["client_cpu_ms_per_task"] + out["server_cpu_ms_per_task"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.workflows", description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20_000, help="tasks per run (the fan-out's width + 1)")
    parser.add_argument("--chains", type=int, default=2_000, help="workflows in the chains run (steps / chains each)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--kinds",
        default=",".join(KINDS),
        help=f"the kinds to run, comma-separated (default all: {','.join(KINDS)}); plain always runs",
    )
    parser.add_argument(
        "--no-gc-tuning",
        action="store_true",
        help="work with the worker's gc_tuning off (shardq.worker.collector), to compare",
    )
    parser.add_argument("--one", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--kind", choices=KINDS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one, args.kind, args.steps, args.chains, not args.no_gc_tuning)))
        return 0

    from loadtest.env import Bench, loadavg, track_commit_times

    kinds = tuple(k for k in KINDS if k == "plain" or k in args.kinds.split(","))
    bench = Bench.start()
    track_commit_times(bench)
    rounds = []
    try:
        for _ in range(args.rounds):
            runs: dict[str, list[dict]] = {kind: [] for kind in kinds}
            for kind in (*kinds, *reversed(kinds)):
                url = bench.shardq_database(f"wf_{kind}")
                try:
                    runs[kind].append(_run(url, kind, args.steps, args.chains, bench.server_cpu, not args.no_gc_tuning))
                finally:
                    bench.drop(url)
                print(f"{kind}: {runs[kind][-1]['cpu_ms_per_task']:.3f} ms CPU per task", file=sys.stderr, flush=True)
            rounds.append(runs)
        load = loadavg()
    finally:
        bench.close()

    def median(kind: str, figure: str) -> float:
        return statistics.median(r[figure] for runs in rounds for r in runs[kind])

    report: dict = {
        "steps": args.steps,
        "chains": args.chains,
        "chain_length": args.steps // args.chains,
        "gc_tuning": not args.no_gc_tuning,
        "rounds": rounds,
        "loadavg_after": load,
    }
    for kind in kinds:
        for figure in ("cpu_ms_per_task", "client_cpu_ms_per_task", "server_cpu_ms_per_task", "work_s", "enqueue_s"):
            report[f"{kind}_{figure}"] = median(kind, figure)
    if "fan" in kinds and "fan-shards" in kinds:
        report["fan_shards_over_fan"] = statistics.median(
            statistics.median(r["cpu_ms_per_task"] for r in runs["fan-shards"])
            / statistics.median(r["cpu_ms_per_task"] for r in runs["fan"])
            for runs in rounds
        )
    for kind in (k for k in ("fan", "fan-shards", "chains") if k in kinds):
        # Ratios within a round (each run beside its own plain runs), then the median over rounds.
        report[f"{kind}_over_plain"] = statistics.median(
            statistics.median(r["cpu_ms_per_task"] for r in runs[kind])
            / statistics.median(r["cpu_ms_per_task"] for r in runs["plain"])
            for runs in rounds
        )
    for kind in (k for k in ("fan", "fan-shards", "fan-listen") if k in kinds):
        for figure in ("release_after_ack_ms", "release_after_handler_ms"):
            report[f"{kind}_{figure}"] = median(kind, figure)
    print(json.dumps(report))
    for key, value in report.items():
        if isinstance(value, float):
            print(f"{key:36} {value:10.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
