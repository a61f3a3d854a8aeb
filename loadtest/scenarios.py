"""The benchmark scenarios. Each takes the run's :class:`Bench` and :class:`Sizes` and returns a
JSON-able dict; none asserts anything (goals are judged by the report, as ratios within one run).
"""

from __future__ import annotations

import importlib.util
import json
import os
import queue as queue_module
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg

from loadtest.contenders import BATCH, CONTENDERS, shardq_bench
from loadtest.env import Bench, _proc_cpu, checkpoint, loadavg, table_stats, vacuum_analyze
from loadtest.latency import cells as latency_cells
from loadtest.procs import CellResult, run_cell

PROCESSES = 4
REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Sizes:
    """Everything that differs between ``--quick`` and the full run."""

    burn_tasks: int = 100_000
    burn_cap: float = 40.0
    burn_reps: int = 4  # paired raw/shardq repetitions (even: ABBA order)
    peers: tuple[str, ...] = (
        "shardq-async",
        "pgqueuer-defaults",
        "pgqueuer-tuned",
        "procrastinate-defaults",
        "procrastinate-tuned",
    )
    steady_rate: int = 2000
    steady_seconds: float = 15.0
    steady_contenders: tuple[str, ...] = ("shardq", "shardq+poll", "pgqueuer-tuned", "procrastinate-tuned")
    idle_samples: int = 30
    idle_contenders: tuple[str, ...] = ("shardq+poll", "shardq", "pgqueuer-tuned")
    #: the latency cells (loadtest.latency): offered rates, CPU load generators beside (0: quiet)
    latency_rates: tuple[int, ...] = (2000, 10000)
    latency_loads: tuple[int, ...] = (0, 1)
    latency_contenders: tuple[str, ...] = ("shardq", "shardq+poll", "pgqueuer-defaults", "pgqueuer-tuned")
    latency_seconds: float = 8.0
    depth_small: int = 10_000
    depth_large: int = 1_000_000
    depth_seconds: float = 6.0
    depth_reps: int = 4  # even: ABBA order
    reaper_expired: int = 1_000
    reaper_reps: int = 5
    enqueue_single: int = 3_000
    enqueue_bulk: int = 100_000
    chaos_tasks: int = 30_000
    chaos_lease: float = 2.0
    spark_rows: int = 1_000_000
    spark_rounds: int = 2
    flow_rate: int = 1000
    flow_rate_tasks: int = 15_000
    #: (handler threads per worker, handler seconds, tasks) of each limited/unlimited comparison
    flow_configs: tuple[tuple[int, float, int], ...] = (
        (4, 0.0, 100_000),
        (100, 0.0, 100_000),
        (16, 0.005, 20_000),
        (16, 0.05, 4_000),
    )

    @classmethod
    def quick(cls) -> Sizes:
        return cls(
            burn_tasks=20_000,
            burn_cap=5.0,
            burn_reps=1,
            peers=("shardq-async", "pgqueuer-defaults", "pgqueuer-tuned", "procrastinate-tuned"),
            steady_seconds=4.0,
            steady_contenders=("shardq", "shardq+poll"),
            idle_samples=3,
            latency_rates=(2000,),
            latency_seconds=3.0,
            depth_small=10_000,
            depth_large=50_000,
            depth_seconds=2.0,
            depth_reps=1,
            reaper_reps=3,
            enqueue_single=300,
            enqueue_bulk=10_000,
            chaos_tasks=6_000,
            chaos_lease=1.0,
            spark_rows=0,
            flow_rate_tasks=6_000,
            flow_configs=((4, 0.0, 20_000), (100, 0.0, 20_000), (16, 0.005, 5_000), (16, 0.05, 2_000)),
        )


def _worker_spec(url: str, **extra) -> dict:
    return {"url": url, "batch": BATCH, **extra}


def _cell_summary(cell: CellResult, **extra) -> dict:
    out = {
        "rate": cell.rate(),
        "executed": cell.total(),
        "elapsed": (max((r.get("last", 0.0) for r in cell.roles), default=cell.started) - cell.started),
        "capped": cell.capped,
        "killed_roles": cell.killed,
        "errors": cell.errors(),
        "samples": cell.samples,
        "cpu_ms_per_task": cell.cpu_per_task_ms(),
        "roles": [
            {k: v for k, v in r.items() if k not in ("latencies", "created_latencies", "starts")} for r in cell.roles
        ],
    }
    out.update(extra)
    return out


def percentiles(values: list[float]) -> dict:
    if not values:
        return {}
    ordered = sorted(values)

    def pick(p: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(p / 100.0 * len(ordered) + 0.5) - 1))]

    return {
        "n": len(ordered),
        "p50_ms": pick(50) * 1e3,
        "p95_ms": pick(95) * 1e3,
        "p99_ms": pick(99) * 1e3,
        "max_ms": ordered[-1] * 1e3,
        "mean_ms": statistics.fmean(ordered) * 1e3,
    }


# -- burn-down ------------------------------------------------------------------------------
def burn_one(bench: Bench, name: str, sizes: Sizes) -> dict:
    contender = CONTENDERS[name]
    url = contender.setup(bench, name)
    try:
        insert_seconds = contender.impl().enqueue_many(url, sizes.burn_tasks)
        vacuum_analyze(url)
        checkpoint(url)
        load_before = loadavg()
        spec = _worker_spec(url, drain=True, options=contender.options, asynchronous=name.endswith("-async"))
        cell = run_cell([(contender.worker, spec)] * PROCESSES, cap=sizes.burn_cap, server_cpu=bench.server_cpu)
        left = contender.pending(url)
        return _cell_summary(
            cell,
            contender=name,
            tasks=sizes.burn_tasks,
            left=left,
            drained=left == 0 and not cell.capped,
            bulk_enqueue_rate=sizes.burn_tasks / insert_seconds,
            load_before=load_before,
            load_after=loadavg(),
        )
    finally:
        bench.drop(url)


def burn_down(bench: Bench, sizes: Sizes, log) -> dict:
    """Pre-insert N with each system's bulk enqueue, VACUUM ANALYZE, then drain with no-op tasks
    from 4 processes; tasks/s = executed / (last execution start - release). raw and shardq run
    ``burn_reps`` times, interleaved in ABBA order (raw first, then shardq first, ...: a cell
    inherits its predecessor's background work, so neither should always go second), and are
    compared pair by pair; peers run once."""
    pairs = []
    for rep in range(sizes.burn_reps):
        pair: dict[str, Any] = {}
        for name in ("raw-bound", "shardq") if rep % 2 == 0 else ("shardq", "raw-bound"):
            result = burn_one(bench, name, sizes)
            log(f"burn-down rep {rep + 1} {name}: {result['rate']:,.0f} tasks/s (load {result['load_before']})")
            pair[name] = result
        pair["ratio"] = pair["shardq"]["rate"] / pair["raw-bound"]["rate"] if pair["raw-bound"]["rate"] else None
        pairs.append(pair)
    peers = {}
    for name in sizes.peers:
        result = burn_one(bench, name, sizes)
        log(
            f"burn-down {name}: {result['rate']:,.0f} tasks/s, drained={result['drained']} (load {result['load_before']})"
        )
        peers[name] = result
    raw_rates = [p["raw-bound"]["rate"] for p in pairs]
    shardq_rates = [p["shardq"]["rate"] for p in pairs]
    raw_median = statistics.median(raw_rates)
    summary = {
        "raw-bound": raw_median,
        "shardq": statistics.median(shardq_rates),
        **{name: r["rate"] for name, r in peers.items()},
    }
    ratios = [p["ratio"] for p in pairs if p["ratio"]]

    def cpu(cells: list[dict]) -> float | None:
        values = [c["cpu_ms_per_task"].get("total") for c in cells if c["cpu_ms_per_task"].get("total")]
        return statistics.median(values) * 1e3 if values else None

    cpu_us = {
        "raw-bound": cpu([p["raw-bound"] for p in pairs]),
        "shardq": cpu([p["shardq"] for p in pairs]),
        **{name: cpu([r]) for name, r in peers.items()},
    }
    return {
        "tasks": sizes.burn_tasks,
        "processes": PROCESSES,
        "batch": BATCH,
        "pairs": pairs,
        "peers": peers,
        "rates": summary,
        "ratio_to_raw": {name: rate / raw_median for name, rate in summary.items()},
        "shardq_over_raw_paired": {
            "median": statistics.median(ratios) if ratios else None,
            "min": min(ratios, default=None),
            "max": max(ratios, default=None),
        },
        "raw_spread": (max(raw_rates) - min(raw_rates)) / raw_median if len(raw_rates) > 1 else None,
        "cpu_us_per_task": cpu_us,
        "notes": {name: CONTENDERS[name].note for name in summary},
    }


def paired_drains(bench: Bench, sizes: Sizes, log, label: str, modes: tuple[str, str], fill, spec_of) -> list[dict]:
    """``sizes.burn_reps`` pairs of drains by 4 worker processes, one per mode, in ABBA order
    (a cell inherits its predecessor's background work, so neither mode should always go
    second): ``fill(url, mode)`` puts the tasks in a fresh database, ``spec_of(url, mode)`` is the
    workers' spec. Each pair gets ``ratio`` = second mode's rate / first mode's."""
    shardq = CONTENDERS["shardq"]
    base, other = modes
    pairs = []
    for rep in range(sizes.burn_reps):
        pair: dict = {}
        for mode in modes if rep % 2 == 0 else modes[::-1]:
            url = bench.shardq_database(f"{label.split()[0].replace('-', '_')}_{mode}")
            try:
                fill(url, mode)
                vacuum_analyze(url)
                checkpoint(url)
                cell = run_cell(
                    [(shardq.worker, spec_of(url, mode))] * PROCESSES, cap=sizes.burn_cap, server_cpu=bench.server_cpu
                )
                pair[mode] = _cell_summary(cell, left=shardq.pending(url))
            finally:
                bench.drop(url)
            log(f"{label} rep {rep + 1} {mode}: {pair[mode]['rate']:,.0f} tasks/s")
        pair["ratio"] = pair[other]["rate"] / pair[base]["rate"] if pair[base]["rate"] else None
        pairs.append(pair)
    return pairs


# -- task API -------------------------------------------------------------------------------
def task_api(bench: Bench, sizes: Sizes, log) -> dict:
    """The task API's cost over the bytes API, paired in ABBA order like the burn-down: (1) a
    drain of ``burn_tasks`` no-op tasks by 4 worker processes with a bare handler against the
    same tasks dispatched by ``App.dispatch`` (JSON decode, dispatch by name; identical payload
    bytes); (2) ``AppTask.defer_many`` against ``Client.enqueue_many`` of payloads of the same
    size, ``enqueue_bulk`` tasks each in alternating chunks of 1,000 in one database per repetition
    (separate databases per method measured the databases' drift more than the methods)."""
    payloads = shardq_bench.app_payloads(sizes.burn_tasks)
    drains = paired_drains(
        bench,
        sizes,
        log,
        "task-api drain",
        ("bare", "app"),
        lambda url, mode: shardq_bench.enqueue_payloads(url, payloads),
        lambda url, mode: _worker_spec(url, drain=True, app=mode == "app"),
    )
    enqueues = []
    for rep in range(max(2, sizes.burn_reps)):
        url = bench.shardq_database(f"api_enqueue_{rep}")
        try:
            spent = shardq_bench.interleaved_enqueue(url, sizes.enqueue_bulk)
        finally:
            bench.drop(url)
        pair = {mode: sizes.enqueue_bulk / seconds for mode, seconds in spent.items()}
        pair["ratio"] = pair["defer_many"] / pair["enqueue_many"]
        log(
            f"task-api enqueue rep {rep + 1}: enqueue_many {pair['enqueue_many']:,.0f}/s, "
            f"defer_many {pair['defer_many']:,.0f}/s (interleaved chunks)"
        )
        enqueues.append(pair)
    drain_ratios = [p["ratio"] for p in drains if p["ratio"]]
    enqueue_ratios = [p["ratio"] for p in enqueues]
    return {
        "tasks": sizes.burn_tasks,
        "payload_bytes": len(payloads[0]),
        "drains": drains,
        "enqueues": enqueues,
        "app_over_bare_paired": statistics.median(drain_ratios) if drain_ratios else None,
        "defer_many_over_enqueue_many_paired": statistics.median(enqueue_ratios),
    }


# -- flow control ---------------------------------------------------------------------------
def flow_control(bench: Bench, sizes: Sizes, log) -> dict:
    """Flow control's cost and accuracy. (1) For each of ``flow_configs`` (handler threads per
    worker, handler seconds, tasks): paired ABBA drains by 4 worker processes of the queue without
    a limit against the same queue limited to the workers' total concurrency. (2) ``flow_rate_tasks``
    no-op tasks on a queue limited to ``flow_rate`` starts per second (burst: the rate) drained by 4
    workers of 4 threads: starts per second from 3 s in (the burst long spent) to the last start."""
    shardq = CONTENDERS["shardq"]
    configs = []
    for threads, seconds, tasks in sizes.flow_configs:
        total_concurrency = PROCESSES * threads

        def fill(url: str, mode: str, tasks: int = tasks, total_concurrency: int = total_concurrency) -> None:
            shardq_bench.enqueue_many(url, tasks)
            if mode == "limited":
                shardq_bench.set_limits(url, concurrency=total_concurrency)

        pairs = paired_drains(
            bench,
            sizes,
            log,
            f"flow {threads} threads, {seconds * 1e3:g} ms tasks",
            ("unlimited", "limited"),
            fill,
            lambda url, mode, threads=threads, seconds=seconds: _worker_spec(
                url, drain=True, concurrency=threads, sleep=seconds
            ),
        )
        ratios = [p["ratio"] for p in pairs if p["ratio"]]
        configs.append(
            {
                "threads_per_worker": threads,
                "handler_seconds": seconds,
                "tasks": tasks,
                "total_concurrency": total_concurrency,
                "pairs": pairs,
                "limited_over_unlimited_paired": statistics.median(ratios) if ratios else None,
            }
        )
    url = bench.shardq_database("flow_rate")
    try:
        shardq_bench.enqueue_many(url, sizes.flow_rate_tasks)
        shardq_bench.set_limits(url, rate=sizes.flow_rate)
        vacuum_analyze(url)
        spec = _worker_spec(url, drain=True, concurrency=4)
        cap = sizes.flow_rate_tasks / sizes.flow_rate * 2 + 10
        cell = run_cell([(shardq.worker, spec)] * PROCESSES, cap=cap, sample_every=0.1, server_cpu=bench.server_cpu)
        rated = _cell_summary(cell, left=shardq.pending(url))
    finally:
        bench.drop(url)
    steady = [(t, n) for t, n in cell.samples if t >= 3.0 and n < sizes.flow_rate_tasks]
    sustained = (
        (steady[-1][1] - steady[0][1]) / (steady[-1][0] - steady[0][0])
        if len(steady) >= 2 and steady[-1][0] > steady[0][0]
        else None
    )
    busiest = max(
        (n2 - n1 for (t1, n1) in cell.samples for (t2, n2) in cell.samples if 0.95 <= t2 - t1 <= 1.05), default=None
    )
    log(
        f"flow rate {sizes.flow_rate}/s: sustained {sustained or 0:,.0f} starts/s, busiest second {busiest}, "
        f"{rated['executed']} run"
    )
    return {
        "configs": configs,
        "rate": {
            "limit": sizes.flow_rate,
            "tasks": sizes.flow_rate_tasks,
            "sustained_per_s": sustained,
            "busiest_second": busiest,
            "executed": rated["executed"],
            "elapsed": rated["elapsed"],
            "left": rated.get("left"),
            "samples": cell.samples,
        },
    }


# -- steady state ---------------------------------------------------------------------------
def _steady_roles(name: str, url: str, rate: int, *, idle: bool = False, samples: int = 0):
    poll = name.endswith("+poll")  # shardq with LISTEN/NOTIFY off: polling only
    contender = CONTENDERS[name.removesuffix("+poll")]
    spec = _worker_spec(url, drain=False, latency=True, options=dict(contender.options))
    producer_spec = {"url": url, "rate": rate}
    if poll:
        spec["options"]["listen"] = False
        producer_spec["notify"] = False
    producer = contender.producer
    if idle:
        producer = f"{contender.module}:idle_producer" if contender.module.endswith(("shardq_bench", "pgq")) else None
        producer_spec = {**producer_spec, "samples": samples, "gap": (1.2, 2.2) if poll else (0.3, 0.8)}
    return contender, [(contender.worker, spec)] * PROCESSES + [(producer, producer_spec)]


def steady(bench: Bench, sizes: Sizes, log) -> dict:
    """A producer process enqueues at a fixed rate (one call every 5 ms carrying the tasks due)
    while 4 worker processes run; enqueue→start latency = handler start - producer clock at send.
    Executions in the first second are warm-up and left out."""
    out = {}
    warm = 1.0
    for name in sizes.steady_contenders:
        contender = CONTENDERS[name.removesuffix("+poll")]
        url = contender.setup(bench, name.replace("+", "_"))
        try:
            _, roles = _steady_roles(name, url, sizes.steady_rate)
            vacuum_analyze(url)
            # The burn-downs just before leave a checkpoint due: taken here, not inside the cell
            # of whichever contender runs first (as the latency cells do).
            checkpoint(url)
            load_before = loadavg()
            cell = run_cell(
                roles, duration=sizes.steady_seconds, cap=sizes.steady_seconds + 5, server_cpu=bench.server_cpu
            )
            producer = cell.roles[-1] if cell.roles and "sent" in cell.roles[-1] else {}
            workers = CellResult(cell.roles[:-1], cell.started, cell.ended)
            lat = workers.latencies(after=warm)
            executed = workers.total()
            summary = _cell_summary(
                cell,
                contender=name,
                offered_rate=sizes.steady_rate,
                sent=producer.get("sent"),
                producer=producer,
                achieved_rate=executed / sizes.steady_seconds,
                executed=executed,
                backlog=(producer.get("sent") or 0) - executed,
                latency=percentiles(lat),
                latency_db_clock=percentiles(workers.latencies("created_latencies", after=warm)),
                latency_sample=random.Random(1).sample(lat, min(3000, len(lat))),
                load_before=load_before,
                load_after=loadavg(),
            )
            out[name] = summary
            p = summary["latency"]
            log(
                f"steady {name}: {summary['achieved_rate']:,.0f}/s of {sizes.steady_rate}, "
                f"p50 {p.get('p50_ms', float('nan')):.1f} ms p99 {p.get('p99_ms', float('nan')):.1f} ms"
            )
        finally:
            bench.drop(url)
    return out


# -- idle latency ---------------------------------------------------------------------------
def idle(bench: Bench, sizes: Sizes, log) -> dict:
    """4 idle workers; single tasks enqueued one at a time, spaced so the workers have backed off
    to their longest poll interval (polling only) or are parked on LISTEN (default). pgqueuer
    (tuned: its workers listen too) runs the same cell as the reference for the listening case."""
    out: dict[str, dict[str, Any]] = {}
    for name in sizes.idle_contenders:
        contender = CONTENDERS[name.removesuffix("+poll")]
        url = contender.setup(bench, "idle_" + name.replace("+", "_").replace("-", "_"))
        try:
            _, roles = _steady_roles(name, url, 1, idle=True, samples=sizes.idle_samples)
            samples = sizes.idle_samples

            def all_started(counters: list[int], samples: int = samples) -> bool:
                return counters[-1] >= samples and sum(counters[:-1]) >= samples

            cell = run_cell(roles, wait_for=all_started, cap=samples * 3 + 10)
            lat = cell.latencies()
            out[name] = {"latency": percentiles(lat), "values_ms": [v * 1e3 for v in lat], "errors": cell.errors()}
            p = out[name]["latency"]
            log(f"idle {name}: max {p.get('max_ms', float('nan')):.0f} ms, p50 {p.get('p50_ms', float('nan')):.0f} ms")
        finally:
            bench.drop(url)
    return out


# -- depth and reaper -----------------------------------------------------------------------
TOP_UP_CHUNK = 1000
TOP_UP_CONNECTIONS = 3


class _TopUp:
    """Keeps a table at its depth while workers drain it: ``run_cell``'s ``during`` hook counts
    what the workers finished and queues that many new tasks, inserted by ``connections``
    threads with a connection each, in statements of at most ``TOP_UP_CHUNK`` rows.

    Several connections because one falls behind shardq's workers on 2 cores (a shardq task row
    has more to write than the raw bound's, a unique id index among others): measured 8.6-9.4k
    rows short per 6 s window at 10k, so the table ran dry for moments and the cell timed idle
    back-offs. Short statements, like a producer's batches, because one long insert holds back
    the oldest snapshot for its whole run, and until then no claim may skip the rows the workers
    deleted meanwhile without visiting them (one 4,800-row top-up took ~110 ms and doubled the
    claims' execution time)."""

    def __init__(self, impl, url: str, connections: int = TOP_UP_CONNECTIONS) -> None:
        self._impl = impl
        self._queued = 0
        self._chunks: queue_module.SimpleQueue[int | None] = queue_module.SimpleQueue()
        self._conns = [psycopg.connect(url, autocommit=True) for _ in range(connections)]
        self.pids = [c.execute("SELECT pg_backend_pid()").fetchone()[0] for c in self._conns]
        self._threads = [threading.Thread(target=self._insert, args=(c,), daemon=True) for c in self._conns]
        for thread in self._threads:
            thread.start()

    def __call__(self, _elapsed: float, counters: list[int]) -> None:
        deficit = sum(counters) - self._queued
        while deficit >= 50:
            chunk = min(deficit, TOP_UP_CHUNK)
            self._chunks.put(chunk)
            self._queued += chunk
            deficit -= chunk

    def _insert(self, conn: psycopg.Connection) -> None:
        while (chunk := self._chunks.get()) is not None:
            self._impl.fill_with(conn, chunk)

    def cpu_seconds(self) -> float:
        return sum(_proc_cpu(pid) for pid in self.pids)

    def close(self) -> None:
        for _ in self._threads:
            self._chunks.put(None)
        for thread in self._threads:
            thread.join(60)
        for conn in self._conns:
            conn.close()


def _depth_window(bench: Bench, name: str, url: str, depth: int, sizes: Sizes) -> dict:
    """One timed window: 4 processes claim and finish tasks while the parent tops the table up
    to ``depth`` (:class:`_TopUp`); rate over the last 80 % of the window."""
    contender = CONTENDERS[name]
    refilled = _refill(contender, url, depth)
    vacuum_analyze(url)
    checkpoint(url)
    top_up = _TopUp(contender.impl(), url)
    topper_cpu = top_up.cpu_seconds()
    spec = _worker_spec(url, drain=False, options=contender.options)
    try:
        cell = run_cell(
            [(contender.worker, spec)] * PROCESSES,
            duration=sizes.depth_seconds,
            during=top_up,
            server_cpu=bench.server_cpu,
        )
        topper_cpu = top_up.cpu_seconds() - topper_cpu
    finally:
        top_up.close()
    # The top-up's inserts cost more in a bigger table (index pages); take its backends' CPU out
    # to see what claiming and settling alone cost per task.
    cpu = cell.cpu_per_task_ms()
    done = cell.total()
    claim_cpu = (cpu.get("total", 0.0) - topper_cpu * 1e3 / done) * 1e3 if done and "total" in cpu else None
    return _cell_summary(
        cell,
        contender=name,
        depth=depth,
        window_rate=_window_rate(cell.samples, 0.2),
        load_before=loadavg(),
        topup_cpu_seconds=topper_cpu,
        claim_cpu_us_per_task=claim_cpu,
        refilled_before=refilled,
    )


def _refill(contender, url: str, depth: int) -> int:
    """Put back the tasks a previous window finished beyond its top-ups (the workers run on
    briefly after the window closes, and the last top-ups may still be queued), so that every
    window, and the reaper cell, starts from ``depth`` tasks. Returns how many were added (each
    window records it as ``refilled_before``). Without this the 10k table was empty by the
    reaper cell."""
    missing = depth - contender.pending(url)
    if missing > 0:
        with psycopg.connect(url, autocommit=True) as conn:
            contender.impl().fill_with(conn, missing)
    return max(0, missing)


def _window_rate(samples: list[tuple[float, int]], skip_fraction: float) -> float:
    """Rate over the samples after the first ``skip_fraction`` of the cell (warm-up)."""
    if len(samples) < 2:
        return 0.0
    end_t, end_n = samples[-1]
    start = next((s for s in samples if s[0] >= end_t * skip_fraction), samples[0])
    return (end_n - start[1]) / (end_t - start[0]) if end_t > start[0] else 0.0


def depth_and_reaper(bench: Bench, sizes: Sizes, log) -> dict:
    """Claim throughput with ``depth_small`` vs ``depth_large`` ready tasks (kept topped up while
    4 processes drain), for raw and shardq: both tables are filled first, then timed windows
    alternate between them ``depth_reps`` times, in ABBA order (small-large, large-small, ...):
    every window leaves the tables a little more churned and costs drift upward, so a fixed order
    would charge that drift to the depth always measured second. The ratio is the median of the
    per-repetition ratios of adjacent windows. Then, on shardq's two tables,
    the time of one ``Reaper.run_once`` with ``reaper_expired`` expired leases among them."""
    depth: dict = {}
    reaper: dict = {}
    for name in ("raw-bound", "shardq"):
        contender = CONTENDERS[name]
        urls: dict[int, str] = {}
        fills: dict[int, float] = {}
        try:
            for size in (sizes.depth_small, sizes.depth_large):
                urls[size] = contender.setup(bench, f"depth_{name}")
                t0 = time.perf_counter()
                contender.impl().fill(urls[size], size)
                fills[size] = time.perf_counter() - t0
            windows: dict[int, list[dict]] = {size: [] for size in urls}
            for repetition in range(sizes.depth_reps):
                order = list(urls.items())
                for size, url in order if repetition % 2 == 0 else order[::-1]:
                    window = _depth_window(bench, name, url, size, sizes)
                    windows[size].append(window)
                    log(f"depth {name} {size:,}: {window['window_rate']:,.0f} tasks/s")
            depth[name] = {}
            for size, cells in windows.items():
                depth[name][str(size)] = {
                    "window_rate": statistics.median(c["window_rate"] for c in cells),
                    "windows": cells,
                    "fill_seconds": fills[size],
                    "cpu_us_per_task": statistics.median(c["cpu_ms_per_task"].get("total", 0.0) for c in cells) * 1e3,
                    "claim_cpu_us_per_task": statistics.median(c["claim_cpu_us_per_task"] or 0.0 for c in cells),
                }
            pairs = list(zip(windows[sizes.depth_small], windows[sizes.depth_large]))
            rates = [big["window_rate"] / small["window_rate"] for small, big in pairs if small["window_rate"]]
            depth[name]["pair_ratios"] = rates
            depth[name]["large_over_small"] = statistics.median(rates) if rates else None
            # tasks per CPU-second of claiming and settling, large over small: the noise-robust twin
            cpu = [
                small["claim_cpu_us_per_task"] / big["claim_cpu_us_per_task"]
                for small, big in pairs
                if small["claim_cpu_us_per_task"] and big["claim_cpu_us_per_task"]
            ]
            depth[name]["cpu_large_over_small"] = statistics.median(cpu) if cpu else None
            if name == "shardq":
                for size, url in urls.items():
                    _refill(contender, url, size)
                    reaper[str(size)] = reaper_cost(url, sizes, log)
        finally:
            for url in urls.values():
                bench.drop(url)
    return {"depth": depth, "reaper": reaper, "sizes": [sizes.depth_small, sizes.depth_large]}


def reaper_cost(url: str, sizes: Sizes, log) -> dict:
    import shardq
    from loadtest.shardq_paths import Consumer, Reaper
    from shardq.validation import LEASE_MIN_SECONDS

    vacuum_analyze(url)
    client = shardq.connect(url)
    store = client.store
    reaper = Reaper(store)
    reaper.run_once()  # warm: connection, layout, settings, plans
    runs = []
    idle_runs = []
    for _ in range(sizes.reaper_reps):
        t0 = time.perf_counter()
        reaper.run_once()
        idle_runs.append(time.perf_counter() - t0)
        consumer = Consumer(store, [shardq_bench.QUEUE], batch=100, lease_seconds=LEASE_MIN_SECONDS)
        held = 0
        while held < sizes.reaper_expired:
            found = consumer.claim(limit=min(100, sizes.reaper_expired - held))
            held += len(found.tasks)
            if found.round_empty:
                break
        time.sleep(LEASE_MIN_SECONDS + 0.1)  # the shortest lease there is has run out
        blocks = _reap_candidate_blocks(url, store.layout().visit_count)
        t0 = time.perf_counter()
        result = reaper.run_once()
        runs.append(
            {"seconds": time.perf_counter() - t0, "reaped": result.reaped, "held": held, "candidate_blocks": blocks}
        )
    client.close()
    rows = table_stats(url, "shardq_tasks")
    median = statistics.median(r["seconds"] for r in runs)
    log(f"reaper among {rows.get('live', 0):,} rows: {median * 1e3:.0f} ms for {runs[-1]['reaped']} expired leases")
    return {
        "runs": runs,
        "median_seconds": median,
        "idle_median_seconds": statistics.median(idle_runs),
        "candidate_blocks": statistics.median(r["candidate_blocks"] for r in runs),
        "table": rows,
    }


def _reap_candidate_blocks(url: str, buckets: int) -> int:
    """Buffers the reaper's candidate search touches over every bucket (EXPLAIN ANALYZE of the
    read-only statement): a count, so unlike milliseconds it does not move with the machine's
    load, and it shows whether the work follows expired leases or table size."""
    from loadtest.shardq_paths import statements_for

    text = statements_for("postgresql")["task_reap_candidates"].text
    total = 0
    with psycopg.connect(url, autocommit=True) as conn:
        for bucket in range(buckets):
            plan = conn.execute(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + text, {"bucket": bucket, "limit": 500}
            ).fetchone()[0][0]["Plan"]
            total += plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)
    return total


# -- enqueue --------------------------------------------------------------------------------
def enqueue(bench: Bench, sizes: Sizes, log) -> dict:
    """Tasks/s enqueued from one process: one statement per task, and the bulk API in chunks
    of 1,000 (one statement per chunk) — for every system, each in a fresh database."""
    out: dict = {}
    for name in ("raw-bound", "shardq", "pgqueuer-tuned", "procrastinate-tuned"):
        contender = CONTENDERS[name]
        key = name.split("-")[0] if name != "raw-bound" else name
        url = contender.setup(bench, f"enq_{key}")
        try:
            single = contender.impl().enqueue_single(url, sizes.enqueue_single)
            bulk = contender.impl().enqueue_many(url, sizes.enqueue_bulk)
        finally:
            bench.drop(url)
        out[key] = {"single_rate": sizes.enqueue_single / single, "bulk_rate": sizes.enqueue_bulk / bulk}
        log(f"enqueue {key}: single {out[key]['single_rate']:,.0f}/s, bulk {out[key]['bulk_rate']:,.0f}/s")
    out["spark"] = spark(bench, sizes, log)
    return out


def spark(bench: Bench, sizes: Sizes, log) -> dict:
    """Spark JDBC enqueue vs Spark appending the same rows to a plain table, measured by
    ``loadtest/spark_enqueue.py`` (written with the Spark writer) in its own process against a
    scratch database of this server. Skipped when that script, pyspark or Java is missing, and in
    ``--quick`` (the JVM's start-up alone takes most of the budget)."""
    script = Path(__file__).resolve().parent / "spark_enqueue.py"
    if not sizes.spark_rows:
        return {"skipped": "not in --quick mode (run the full load test)"}
    if not script.exists():
        return {"skipped": "loadtest/spark_enqueue.py is not in this tree"}
    if importlib.util.find_spec("pyspark") is None or shutil.which("java") is None:
        return {"skipped": "needs pyspark and Java: pip install -e '.[spark]' and a JRE (see docs/spark.md)"}
    url = bench.database("spark")
    out = Path(tempfile.mkdtemp(prefix="loadtest-spark-")) / "spark.json"
    try:
        proc = subprocess.run(
            [
                sys.executable,
                str(script),
                "--rows",
                str(sizes.spark_rows),
                "--rounds",
                str(sizes.spark_rounds),
                "--dsn",
                url,
                "--out",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=900,
            cwd=REPO,
            check=False,
        )
        if proc.returncode != 0 or not out.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            return {"error": f"spark_enqueue.py exited {proc.returncode}: {' | '.join(tail)}"}
        figures = json.loads(out.read_text())
    except subprocess.TimeoutExpired:
        return {"error": "spark_enqueue.py timed out after 900 s"}
    finally:
        shutil.rmtree(out.parent, ignore_errors=True)
        bench.drop(url)
    result = {
        k: figures[k]
        for k in (
            "rows",
            "rounds",
            "row_key",
            "plain_rows_per_s",
            "shardq_rows_per_s",
            "ratio",
            "plain_seconds",
            "shardq_seconds",
            "floor_rows_per_s",
            "floor_ratio",
            "floor_seconds",
        )
        if k in figures
    }
    result["shardq_runs"] = [
        {k: run[k] for k in ("write_seconds", "merge_seconds", "staged_rows") if k in run}
        for run in figures.get("shardq_runs", [])
    ]
    log(
        f"spark: shardq {result.get('shardq_rows_per_s', 0):,} rows/s vs plain {result.get('plain_rows_per_s', 0):,} "
        f"rows/s: {result.get('ratio')}"
    )
    return result


# -- chaos ----------------------------------------------------------------------------------
def chaos(bench: Bench, sizes: Sizes, log) -> dict:
    """4 ``shardq work`` processes (lease ``chaos_lease`` s) and one ``shardq reap --interval
    0.5`` drain N tasks; one worker is SIGKILLed after a third is done. Recovery time = last start
    of a task's second attempt - kill; duplicates = executions beyond one per task."""
    return _chaos(bench, sizes, log, reaper=True)


def _chaos(bench: Bench, sizes: Sizes, log, *, reaper: bool) -> dict:
    """The chaos cell, with a ``shardq reap`` process or (``reaper=False``) with workers only,
    whose lease sweepers recover the killed worker's tasks."""
    name = "chaos" if reaper else "chaos-no-reaper"
    url = bench.shardq_database(name.replace("-", "_"))
    records = tempfile.mkdtemp(prefix="loadtest-chaos-")
    env = dict(
        os.environ,
        SHARDQ_DSN=url,
        LOADTEST_RECORD_DIR=records,
        PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    )
    shardq_cli = [sys.executable, "-m", "shardq.cli.main"]
    procs: list[subprocess.Popen] = []
    try:
        shardq_bench.enqueue_many(url, sizes.chaos_tasks)
        vacuum_analyze(url)
        conn = psycopg.connect(url, autocommit=True)
        if reaper:
            procs.append(
                subprocess.Popen(
                    shardq_cli + ["reap", "--interval", "0.5"],
                    env=env,
                    cwd=REPO,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        started = time.time()
        workers = [
            subprocess.Popen(
                shardq_cli
                + [
                    "work",
                    shardq_bench.QUEUE,
                    "--handler",
                    "loadtest.handlers:record",
                    "--lease",
                    str(sizes.chaos_lease),
                    "--grace",
                    "5",
                ],
                env=env,
                cwd=REPO,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            for _ in range(PROCESSES)
        ]
        procs.extend(workers)
        killed_at = None
        victim = workers[0]
        deadline = started + 120
        left = sizes.chaos_tasks
        while time.time() < deadline:
            left = conn.execute("SELECT count(*) FROM shardq_tasks").fetchone()[0]
            if killed_at is None and left <= sizes.chaos_tasks * 2 // 3:
                victim.send_signal(signal.SIGKILL)
                killed_at = time.time()
                log(f"{name}: SIGKILL worker pid {victim.pid} with {left:,} tasks left")
            if left == 0:
                break
            time.sleep(0.05)
        drained_at = time.time()
        for w in procs:
            if w is not victim:
                w.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        conn.close()
        from loadtest.handlers import read_records

        lines = read_records(records)
        seen: dict[str, int] = {}
        for task_id, *_ in lines:
            seen[task_id] = seen.get(task_id, 0) + 1
        retried = [t for t in lines if t[1] >= 2]
        victim_file = f"{victim.pid}.rec"
        result = {
            "tasks": sizes.chaos_tasks,
            "lease_seconds": sizes.chaos_lease,
            "reap_interval": 0.5 if reaper else None,
            "left_at_end": left,
            "drain_seconds": drained_at - started,
            "killed_after_seconds": (killed_at - started) if killed_at else None,
            "executions": len(lines),
            "distinct_tasks": len(seen),
            "lost": sizes.chaos_tasks - len(seen),
            "duplicates": sum(n - 1 for n in seen.values()),
            "duplicates_started_by_victim": sum(1 for t in lines if t[3] == victim_file and seen[t[0]] > 1),
            "recovered": len({t[0] for t in retried}),
            "recovery_seconds": (max(t[2] for t in retried) - killed_at) if retried and killed_at else None,
            "first_recovery_seconds": (min(t[2] for t in retried) - killed_at) if retried and killed_at else None,
            "timeline": _timeline(lines, started),
        }
        log(
            f"{name}: recovered {result['recovered']} tasks in {result['recovery_seconds'] or 0:.2f} s, "
            f"duplicates {result['duplicates']}, lost {result['lost']}"
        )
        return result
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        shutil.rmtree(records, ignore_errors=True)
        bench.drop(url)


def sweep(bench: Bench, sizes: Sizes, log) -> dict:
    """Workers sweeping expired leases themselves (shardq.maintenance.lease_sweeper): (1) its cost,
    ``burn_reps`` paired ABBA drains of ``burn_tasks`` no-op tasks by 4 worker processes with the
    sweeper on (the default) and off (``sweep=False``, the code before it); (2) the chaos cell with
    workers only, no reaper process: recovery of a SIGKILLed worker's tasks."""
    pairs = paired_drains(
        bench,
        sizes,
        log,
        "sweep",
        ("off", "on"),
        lambda url, mode: shardq_bench.enqueue_many(url, sizes.burn_tasks),
        lambda url, mode: _worker_spec(url, drain=True, options={"sweep": mode == "on"}),
    )
    ratios = [p["ratio"] for p in pairs if p["ratio"]]
    return {
        "tasks": sizes.burn_tasks,
        "pairs": pairs,
        "on_over_off_paired": statistics.median(ratios) if ratios else None,
        "chaos_no_reaper": _chaos(bench, sizes, log, reaper=False),
    }


def history(bench: Bench, sizes: Sizes, log) -> dict:
    """Keeping finished tasks (shardq.lifecycle.history): ``burn_reps`` paired ABBA drains of ``burn_tasks``
    no-op tasks by 4 worker processes from a queue that keeps nothing (the default) and from one
    that keeps every finished task for a day (one history row per task, written in the ack's
    transaction). Goal: keeping everything at least 0.85x keeping nothing."""

    def fill(url: str, mode: str) -> None:
        shardq_bench.enqueue_many(url, sizes.burn_tasks)
        if mode == "keep":
            shardq_bench.set_limits(url, keep_finished_seconds=86_400)

    pairs = paired_drains(
        bench, sizes, log, "history", ("none", "keep"), fill, lambda url, mode: _worker_spec(url, drain=True)
    )
    ratios = [p["ratio"] for p in pairs if p["ratio"]]
    return {
        "tasks": sizes.burn_tasks,
        "pairs": pairs,
        "keep_over_none_paired": statistics.median(ratios) if ratios else None,
    }


def _timeline(lines, started: float, step: float = 0.1) -> list[tuple[float, int, int]]:
    """Executions per ``step`` seconds: (t, first attempts, later attempts)."""
    buckets: dict[int, list[int]] = {}
    for _, attempt, at, _ in lines:
        slot = buckets.setdefault(int((at - started) / step), [0, 0])
        slot[0 if attempt == 1 else 1] += 1
    return [(k * step, v[0], v[1]) for k, v in sorted(buckets.items())]


SCENARIOS = {
    "burn-down": burn_down,
    "steady": steady,
    "idle": idle,
    "latency": latency_cells,
    "depth": depth_and_reaper,
    "enqueue": enqueue,
    "task-api": task_api,
    "flow": flow_control,
    "chaos": chaos,
    "sweep": sweep,
    "history": history,
}


def sizes_dict(sizes: Sizes) -> dict:
    return asdict(sizes)
