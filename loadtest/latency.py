"""The latency cells of issue #30: enqueue→start at 2,000 and 10,000 tasks/s offered, on a quiet
machine and beside a CPU load generator, shardq (with and without wake-ups) against pgqueuer
(defaults and tuned), all in one run.

Every cell is the steady cell's shape (:func:`loadtest.scenarios.steady`): 4 worker processes with
the contender's defaults, one producer process sending the tasks due every 5 ms, latency = handler
start − the producer's clock at send, the first second left out. The load generator is
``load_procs`` processes that spin on the CPU for the whole cell, started with the cell's roles;
each contender meets the same load. Within a (rate, load) pair the contenders run in turn, in
reverse order on every other pair, so no one always runs first after a quiet spell.
"""

from __future__ import annotations

import random
import time

from loadtest.contenders import CONTENDERS
from loadtest.env import Bench, checkpoint, loadavg, vacuum_analyze
from loadtest.procs import CellResult, Control, run_cell


def burner(spec: dict, ctl: Control) -> dict:
    """Role: spin on the CPU until the cell stops (the load generator)."""
    ctl.ready()
    spins = 0
    while not ctl.stopping():
        for _ in range(20_000):
            spins += 1
    return {"spins": spins}


def cells(bench: Bench, sizes, log) -> dict:
    from loadtest.scenarios import _steady_roles, percentiles

    out: dict = {
        "rates": list(sizes.latency_rates),
        "loads": list(sizes.latency_loads),
        "contenders": list(sizes.latency_contenders),
        "seconds": sizes.latency_seconds,
        "cells": {},
    }
    warm = 1.0
    turn = 0
    for rate in sizes.latency_rates:
        for load in sizes.latency_loads:
            key = f"{rate} {'loaded' if load else 'quiet'}"
            names = list(sizes.latency_contenders)
            if turn % 2:
                names.reverse()
            turn += 1
            row: dict = {}
            for name in names:
                contender = CONTENDERS[name.removesuffix("+poll")]
                url = contender.setup(bench, "lat_" + name.replace("+", "_").replace("-", "_"))
                try:
                    _, roles = _steady_roles(name, url, rate)
                    roles = roles + [("loadtest.latency:burner", {})] * load
                    vacuum_analyze(url)
                    checkpoint(url)  # as before every timed phase: no checkpoint's fsyncs inside the cell
                    load_before = loadavg()
                    cell = run_cell(
                        roles,
                        duration=sizes.latency_seconds,
                        cap=sizes.latency_seconds + 5,
                        server_cpu=bench.server_cpu,
                    )
                    workers = CellResult(cell.roles[:4], cell.started, cell.ended)
                    producer = cell.roles[4] if len(cell.roles) > 4 else {}
                    lat = workers.latencies(after=warm)
                    executed = workers.total()
                    row[name] = {
                        "offered_rate": rate,
                        "achieved_rate": executed / sizes.latency_seconds,
                        "sent": producer.get("sent"),
                        "backlog": (producer.get("sent") or 0) - executed,
                        "latency": percentiles(lat),
                        "latency_sample": random.Random(1).sample(lat, min(2000, len(lat))),
                        "cpu_ms_per_task": cell.cpu_per_task_ms(),
                        "errors": cell.errors(),
                        "load_before": load_before,
                    }
                    p = row[name]["latency"]
                    log(
                        f"latency {key} {name}: {row[name]['achieved_rate']:,.0f}/s, p50 "
                        f"{p.get('p50_ms', float('nan')):.1f} ms p99 {p.get('p99_ms', float('nan')):.1f} ms"
                    )
                finally:
                    bench.drop(url)
                time.sleep(0.5)
            out["cells"][key] = row
    return out


# -- report -----------------------------------------------------------------------------------
IDLE_LISTEN_P99_MS = 5.0


def goals(results: dict) -> list[tuple[str, str, str, bool | None, str]]:
    """Issue #30's goals: in every latency cell shardq's p50 and p99 at or below each pgqueuer's
    (same run, same load); idle queue p99 with wake-ups ≤ 5 ms."""
    rows: list[tuple[str, str, str, bool | None, str]] = []
    for key, row in ((results.get("latency") or {}).get("cells") or {}).items():
        mine = (row.get("shardq") or {}).get("latency") or {}
        if not mine:
            continue
        for peer in ("pgqueuer-defaults", "pgqueuer-tuned"):
            theirs = (row.get(peer) or {}).get("latency") or {}
            if not theirs:
                continue
            met = mine["p50_ms"] <= theirs["p50_ms"] and mine["p99_ms"] <= theirs["p99_ms"]
            rows.append(
                (
                    f"latency {key}: shardq p50 / p99 ≤ {peer}'s",
                    f"≤ {theirs['p50_ms']:.1f} / {theirs['p99_ms']:.1f} ms",
                    f"{mine['p50_ms']:.1f} / {mine['p99_ms']:.1f} ms",
                    met,
                    f"executed {row['shardq']['achieved_rate']:,.0f}/s vs {row[peer]['achieved_rate']:,.0f}/s",
                )
            )
    idle = (results.get("idle") or {}).get("shardq") or {}
    lat = idle.get("latency") or {}
    if lat:
        rows.append(
            (
                "idle queue with wake-ups: enqueue→start p99",
                f"≤ {IDLE_LISTEN_P99_MS:.0f} ms",
                f"{lat['p99_ms']:.1f} ms",
                lat["p99_ms"] <= IDLE_LISTEN_P99_MS,
                f"{lat['n']} samples, p50 {lat['p50_ms']:.1f} ms",
            )
        )
    tuned = ((results.get("idle") or {}).get("pgqueuer-tuned") or {}).get("latency") or {}
    if tuned:  # the same cell for a peer whose workers listen too: what this machine allows
        rows.append(
            (
                "idle queue, pgqueuer-tuned: enqueue→start p99",
                "(reference)",
                f"{tuned['p99_ms']:.1f} ms",
                None,
                f"{tuned['n']} samples, p50 {tuned['p50_ms']:.1f} ms",
            )
        )
    return rows


def section(results: dict, table) -> list[str]:
    data = results.get("latency") or {}
    if not data.get("cells"):
        return []
    rows = []
    for key, row in data["cells"].items():
        for name, c in row.items():
            lat = c.get("latency") or {}
            cpu = (c.get("cpu_ms_per_task") or {}).get("total")
            rows.append(
                [
                    key,
                    name,
                    f"{c['achieved_rate']:,.0f}",
                    f"{lat.get('p50_ms', float('nan')):.1f}",
                    f"{lat.get('p95_ms', float('nan')):.1f}",
                    f"{lat.get('p99_ms', float('nan')):.1f}",
                    f"{lat.get('max_ms', float('nan')):.1f}",
                    "–" if cpu is None else f"{cpu * 1e3:.0f}",
                ]
            )
    return [
        "## Latency (issue #30)",
        "",
        (
            f"The steady cell's shape at each offered rate, quiet and with {max(data['loads'])} CPU-spinning "
            f"process(es) beside it (the same for every contender), {data['seconds']:.0f} s per contender; 4 worker "
            "processes with each system's defaults (pgqueuer tuned: batch 100). Contenders run in turn, reversed on "
            "every other cell."
        ),
        "",
        table(["cell", "contender", "executed/s", "p50 ms", "p95 ms", "p99 ms", "max ms", "CPU µs/task"], rows),
        "",
        "![latency](latency.png)",
        "",
    ]


def plot(results: dict, out, plt, save) -> None:
    data = results.get("latency") or {}
    cells = data.get("cells") or {}
    if not cells:
        return
    fig, axes = plt.subplots(1, len(cells), figsize=(4.2 * len(cells), 4), squeeze=False)
    palette = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")
    colour = {name: palette[i % len(palette)] for i, name in enumerate(data["contenders"])}
    for ax, (key, row) in zip(axes[0], cells.items()):
        for name in data["contenders"]:  # the same colour and order in every panel (cells ran in turn)
            sample = sorted((row.get(name) or {}).get("latency_sample") or [])
            if sample:
                ax.plot(
                    [s * 1e3 for s in sample],
                    [(i + 1) / len(sample) for i in range(len(sample))],
                    label=name,
                    color=colour[name],
                )
        ax.set_xscale("log")
        ax.axhline(0.99, color="grey", linestyle=":")
        ax.set_title(f"{key} (tasks/s offered)")
        ax.set_xlabel("enqueue→start, ms (log)")
    axes[0][0].set_ylabel("fraction of tasks")
    axes[0][0].legend(fontsize=8)
    save(fig, "latency")
