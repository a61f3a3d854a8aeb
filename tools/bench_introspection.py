"""Before/after burn-down: what the introspection hooks cost the hot path.

Runs the same workload against each *variant* (a Python interpreter with some shardq installed,
plus optional extra ``shardq work`` arguments), alternating variants round by round so drift on a
shared machine hits all of them alike, each round in a fresh database on one embedded PostgreSQL:

1. enqueue ``--tasks`` no-op tasks in batches of 1000 (one statement per batch) and time it;
2. ``--single`` tasks per producer process, one statement per task, ``--producers`` processes at
   once (the worst case for a per-statement counter write), and time it;
3. start ``--workers`` ``shardq work … --until-empty`` processes with the no-op handler and time the
   burn-down. The rate is taken between 5 % and 95 % done (polled from the table), so process
   start-up and the idle tail are not in it; the wall time is printed too, and the CPU time the
   worker processes used per 1000 tasks (user + system, from wait4), which a busy shared machine
   disturbs far less than wall-clock rates.

``--worker-cpu N`` instead runs one in-process worker per variant over N no-op tasks against a fake
session that answers the worker's statements from memory (no database), and reports the worker's
CPU time per task: the Python cost of the per-task hooks, free of database and machine noise.
Variant arguments ``metrics`` / ``debug-log`` turn the Prometheus hook / DEBUG logging on.

``--enqueue-ab`` instead times enqueues through two stores in one process, alternating call by call
on one database (batches of 1 and of 1000 rows): one counts its enqueues for the activity
counters as shipped, the other has counting switched off — the enqueue path's own cost, isolated
from the machine's noise.

Example (what docs/introspection.md quotes; install both versions the same way, not editable:
an editable install's import hooks alone add ~0.1 s of CPU per worker process)::

    python tools/bench_introspection.py \
        --variant before=/tmp/venv-before/bin/python \
        --variant after=/tmp/venv-after/bin/python \
        --variant after+metrics="/tmp/venv-after/bin/python --metrics-port 0" --rounds 6

Prints one line per run and the median per variant. Only ratios mean anything: the machine is
shared.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg

ENQUEUE_SNIPPET = """
import sys, time
from shardq.client import Client
client = Client(sys.argv[1])
n = int(sys.argv[2])
start = time.perf_counter()
client.enqueue_many("bench", [b"x"] * n, batch_size=1000)
print(time.perf_counter() - start)
"""

SINGLE_SNIPPET = """
import sys, time
from shardq.client import Client
client = Client(sys.argv[1])
n = int(sys.argv[2])
client.enqueue("single", b"warm-up")
start = time.perf_counter()
for _ in range(n):
    client.enqueue("single", b"x")
print(time.perf_counter() - start)
"""


WORKER_CPU_SNIPPET = r"""
import datetime as dt, logging, sys, time, uuid
from shardq.worker import Worker, WorkerConfig

N = int(sys.argv[1])
NOW = dt.datetime.now(dt.timezone.utc)


class FakeSession:
    dialect = "postgresql"

    def __init__(self):
        self.left = N

    def set_shard_column(self, column):
        pass

    def close(self):
        pass

    def fetch_one(self, name, params=None, **options):
        rows = self.fetch_all(name, params)
        return rows[0] if rows else None

    def execute(self, name, params=None, **options):
        self.fetch_all(name, params)

    def fetch_all(self, name, params=None, **options):
        if name == "layout_get":
            return [{"bucket_count": 16, "resizing_from": None}]
        if name == "task_claim_batch":
            n = min(params["limit"], SHARED.left)
            SHARED.left -= n
            return [{"bucket": params["bucket"], "queue": params["queue"], "rank": 0, "exec_time": NOW,
                     "id": uuid.uuid4(), "attempts": 1, "max_attempts": 25, "payload": b"x", "lease_expires_at": NOW,
                     "created_at": NOW, "priority": 0, "exclusive_key": None} for _ in range(n)]
        if name in ("task_ack_many", "task_release_many"):
            return [{"id": i} for i in params["ids"]]
        return []


SHARED = FakeSession()
kwargs = {}
if "metrics" in sys.argv[2:]:
    from shardq.worker.metrics import WorkerMetrics
    metrics = WorkerMetrics(queues=["q"])
    kwargs = {"on_event": metrics.on_event, "events": metrics.EVENTS}
if "debug-log" in sys.argv[2:]:
    logging.basicConfig(stream=open("/dev/null", "w"), level=logging.DEBUG)
worker = Worker(lambda: SHARED, lambda task: None, WorkerConfig(queues=("q",), until_empty=True), **kwargs)
cpu, wall = time.process_time(), time.perf_counter()
stats = worker.run(install_signal_handlers=False)
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
assert stats.acked == N, stats
print(cpu, wall)
"""


def worker_cpu(variants, args) -> None:
    results: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    for round_no in range(args.rounds):
        order = variants if round_no % 2 == 0 else list(reversed(variants))
        for name, python, extra in order:
            out = subprocess.run(
                [python, "-c", WORKER_CPU_SNIPPET, str(args.worker_cpu), *extra],
                check=True,
                capture_output=True,
                text=True,
                timeout=600,
            ).stdout.split()
            per_task_us = float(out[0]) / args.worker_cpu * 1e6
            results[name].append(per_task_us)
            print(f"round {round_no} {name:16s} cpu/task={per_task_us:.2f} us  wall={float(out[1]):.2f} s", flush=True)
    print("\nmedians (worker CPU per task, no database):")
    base = None
    for name, values in results.items():
        median = statistics.median(values)
        base = base or median
        print(f"  {name:16s} {median:.2f} us ({median / base:.3f}, +{median - base:.2f} us)")


def _parse_variant(text: str) -> tuple[str, str, list[str]]:
    name, _, rest = text.partition("=")
    parts = shlex.split(rest)
    return name, parts[0], parts[1:]


def _count(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM shardq_tasks WHERE queue = 'bench'").fetchone()[0]


def run_once(server_url_for, python: str, extra: list[str], args) -> dict[str, float]:
    name = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_url_for("postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = server_url_for(name)
    try:
        subprocess.run(
            [python, "-m", "shardq.cli.main", "--dsn", url, "migrate", "--buckets", str(args.buckets)],
            check=True,
            capture_output=True,
        )
        enqueue_s = float(
            subprocess.run(
                [python, "-c", ENQUEUE_SNIPPET, url, str(args.tasks)], check=True, capture_output=True, text=True
            ).stdout.strip()
        )
        producers = [
            subprocess.Popen([python, "-c", SINGLE_SNIPPET, url, str(args.single)], stdout=subprocess.PIPE, text=True)
            for _ in range(args.producers)
        ]
        single_s = max(float(p.communicate()[0].strip()) for p in producers)
        command = [
            python,
            "-m",
            "shardq.cli.main",
            "--dsn",
            url,
            "work",
            "bench",
            "--handler",
            "shardq.app.loading:noop",
            "--until-empty",
            "--concurrency",
            str(args.concurrency),
            "--batch",
            str(args.batch),
            *extra,
        ]
        started = time.perf_counter()
        workers = [
            subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(args.workers)
        ]
        low, high = args.tasks * 0.95, args.tasks * 0.05
        t_low = t_high = None
        running = {w.pid for w in workers}
        cpu = 0.0
        while running:
            for pid in list(running):
                done, status, usage = os.wait4(pid, os.WNOHANG)
                if done:
                    running.discard(pid)
                    cpu += usage.ru_utime + usage.ru_stime
                    if os.waitstatus_to_exitcode(status) != 0:
                        raise SystemExit(f"worker {pid} failed with status {status}")
            left = _count(url)
            now = time.perf_counter()
            if t_low is None and left <= low:
                t_low = now
            if t_high is None and left <= high:
                t_high = now
            time.sleep(0.05)
        for w in workers:
            w.returncode = 0  # reaped above
        wall = time.perf_counter() - started
        t_low = t_low or started
        t_high = t_high or time.perf_counter()
        return {
            "enqueue_per_s": args.tasks / enqueue_s,
            "single_enqueue_per_s": args.single * args.producers / single_s,
            "burn_per_s": 0.9 * args.tasks / max(t_high - t_low, 1e-9),
            "burn_wall_s": wall,
            "worker_cpu_ms_per_1k": cpu * 1000 / (args.tasks / 1000),
        }
    finally:
        with psycopg.connect(server_url_for("postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def enqueue_ab(args) -> None:
    """Enqueue through a store that counts (as shipped) and one whose counting is switched off,
    alternating call by call."""
    import uuid as uuid_module

    from shardq.client import Client
    from shardq.lifecycle.enqueue import Producer
    from shardq.migrations import apply as migrate
    from shardq.sessions.dsn import Dsn
    from shardq.sessions.embedded import EmbeddedServer
    from shardq.sessions.store import TaskStore

    server = EmbeddedServer(Path(args.home))
    server.start()
    name = f"bench_{uuid_module.uuid4().hex[:10]}"
    with psycopg.connect(server.url("postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        migrate.upgrade(Dsn.parse(server.url(name)), buckets=args.buckets)
        client = Client(server.url(name))
        counting = Producer(TaskStore(client.new_session()))
        silent_store = TaskStore(client.new_session())
        silent_store.enqueue_counts = None  # enqueues through it are not counted
        producers = {"uncounted": Producer(silent_store), "counted": counting}
        for batch, rounds in ((1, args.single), (1000, max(20, args.tasks // 1000))):
            times: dict[str, list[float]] = {label: [] for label in producers}
            for i in range(rounds):
                order = list(producers.items()) if i % 2 == 0 else list(reversed(producers.items()))
                for label, producer in order:
                    started = time.perf_counter()
                    producer.enqueue_many("ab", [b"x"] * batch, batch_size=1000)
                    times[label].append(time.perf_counter() - started)
            base_median, base_total = statistics.median(times["uncounted"]), sum(times["uncounted"])
            line = [f"batch {batch:5d} x {rounds}:"]
            for label, values in times.items():
                line.append(
                    f"{label} median {statistics.median(values) * 1e3:.3f} ms "
                    f"({statistics.median(values) / base_median:.3f}), total {sum(values):.2f} s "
                    f"({sum(values) / base_total:.3f})"
                )
            print("  ".join(line), flush=True)
        client.close()
    finally:
        with psycopg.connect(server.url("postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", action="append", default=[], metavar='NAME="PYTHON [WORK ARGS]"')
    parser.add_argument(
        "--worker-cpu",
        type=int,
        default=None,
        metavar="N",
        help="time one in-process worker over N tasks against a fake session instead",
    )
    parser.add_argument(
        "--enqueue-ab", action="store_true", help="time enqueues with and without the activity counting instead"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--single", type=int, default=3000, help="single-statement enqueues per producer")
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--buckets", type=int, default=16)
    parser.add_argument("--home", default="/tmp/shardq-bench-home", help="embedded server's SHARDQ_HOME")
    args = parser.parse_args()
    if args.enqueue_ab:
        enqueue_ab(args)
        return
    if not args.variant:
        parser.error("give --variant at least once, or --enqueue-ab")
    if args.worker_cpu:
        worker_cpu([_parse_variant(v) for v in args.variant], args)
        return

    from shardq.sessions.embedded import EmbeddedServer

    server = EmbeddedServer(Path(args.home))
    server.start()
    variants = [_parse_variant(v) for v in args.variant]
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in variants}
    for round_no in range(args.rounds):
        order = variants if round_no % 2 == 0 else list(reversed(variants))
        for name, python, extra in order:
            figures = run_once(server.url, python, extra, args)
            results[name].append(figures)
            print(f"round {round_no} {name:16s} " + "  ".join(f"{k}={v:,.1f}" for k, v in figures.items()), flush=True)
    print("\nmedians:")
    base = None
    for name, runs in results.items():
        medians = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        base = base or medians
        ratios = "  ".join(f"{k}={v:,.1f} ({v / base[k]:.3f})" for k, v in medians.items())
        print(f"  {name:16s} {ratios}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
