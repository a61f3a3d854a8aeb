"""Turn a run's results (the dict ``python -m loadtest`` saves as ``results.json``) into
``report.md`` and PNG plots. Goals are judged here, as ratios within the run."""

from __future__ import annotations

import math
from pathlib import Path

from loadtest import latency

GOALS = {
    "burn_vs_raw": 0.80,
    "burn_vs_pgqueuer": 4.0,
    "steady_p99_ms": 50.0,
    "idle_poll_ms": 1000.0,
    "idle_listen_ms": 100.0,
    "depth_ratio": 0.9,
    "reaper_ratio": 1.5,  # at most this much slower among 100x the rows: cost follows expired leases
    "spark_ratio": 0.7,
    "app_vs_bare": 0.9,
    "async_vs_raw": 0.8,
    "defer_vs_enqueue": 0.9,
    "flow_limited_vs_unlimited": 0.8,
    "flow_rate_low": 950.0,
    "flow_rate_high": 1000.0,
    "sweep_on_vs_off": 0.98,
    "history_keep_vs_none": 0.85,
}


def _f(value, digits: int = 0, suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, (int, float)):
        return f"{value:,.{digits}f}{suffix}"
    return str(value)


def _table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def goals(results: dict) -> list[tuple[str, str, str, bool | None, str]]:
    """(goal, target, measured, met, note) rows; the note says, from this run's own figures, what
    bounds a goal that is missed (or how close a met one is)."""
    rows: list[tuple[str, str, str, bool | None, str]] = []
    burn = results.get("burn-down")
    if burn and "rates" in burn:
        paired = burn["shardq_over_raw_paired"]
        cpu = burn.get("cpu_us_per_task", {})
        cpu_note = ""
        if cpu.get("shardq") and cpu.get("raw-bound"):
            cpu_note = (
                f"CPU per task: shardq {cpu['shardq']:.0f} µs vs raw {cpu['raw-bound']:.0f} µs "
                f"(CPU-bound ratio {cpu['raw-bound'] / cpu['shardq']:.2f}); paired runs "
                f"{_f(paired['min'], 2)}–{_f(paired['max'], 2)}"
            )
        rows.append(
            (
                "burn-down: shardq / raw bound (paired median)",
                f"≥ {GOALS['burn_vs_raw']:.2f}",
                _f(paired["median"], 2),
                paired["median"] is not None and paired["median"] >= GOALS["burn_vs_raw"],
                cpu_note,
            )
        )
        async_rate = burn["rates"].get("shardq-async")
        if async_rate:
            ratio = async_rate / burn["rates"]["raw-bound"]
            rows.append(
                (
                    "burn-down: shardq async handler / raw bound (median)",
                    f"≥ {GOALS['async_vs_raw']:.1f}",
                    _f(ratio, 2),
                    ratio >= GOALS["async_vs_raw"],
                    f"{async_rate:,.0f} vs {burn['rates']['raw-bound']:,.0f} tasks/s; one run against the "
                    "raw bound's median",
                )
            )
        for name in ("pgqueuer-defaults", "pgqueuer-tuned"):
            rate = burn["rates"].get(name)
            if rate:
                ratio = burn["rates"]["shardq"] / rate
                bound = burn["rates"]["raw-bound"] / rate
                note = f"the raw bound itself is {bound:.1f}× {name} here"
                if cpu.get(name) and cpu.get("shardq"):
                    note += f"; CPU per task {cpu[name]:.0f} vs shardq {cpu['shardq']:.0f} µs"
                rows.append(
                    (
                        f"burn-down: shardq / {name}",
                        f"≥ {GOALS['burn_vs_pgqueuer']:.1f}",
                        _f(ratio, 1),
                        ratio >= GOALS["burn_vs_pgqueuer"],
                        note,
                    )
                )
    steady = results.get("steady")
    if steady:
        for name in ("shardq", "shardq+poll"):
            cell = steady.get(name)
            if cell and cell.get("latency"):
                p99 = cell["latency"]["p99_ms"]
                kept_up = cell["achieved_rate"] >= 0.95 * cell["offered_rate"]
                load = cell.get("load_before")
                note = f"load average {load[0]:.1f} at the start" if load else ""
                rows.append(
                    (
                        f"steady 2,000/s, 4 processes: {name} p99",
                        f"≤ {GOALS['steady_p99_ms']:.0f} ms",
                        f"{p99:.1f} ms ({cell['achieved_rate']:,.0f}/s)",
                        p99 <= GOALS["steady_p99_ms"] and kept_up,
                        note,
                    )
                )
    idle = results.get("idle")
    if idle:
        for name, target in (("shardq+poll", GOALS["idle_poll_ms"]), ("shardq", GOALS["idle_listen_ms"])):
            cell = idle.get(name)
            if cell and cell.get("latency"):
                worst = cell["latency"]["max_ms"]
                rows.append(
                    (
                        f"idle queue: {name} worst start",
                        f"≤ {target:.0f} ms",
                        f"{worst:.0f} ms",
                        worst <= target,
                        f"{cell['latency']['n']} samples",
                    )
                )
    depth = results.get("depth")
    if depth:
        small, large = depth["sizes"]
        for name in ("shardq", "raw-bound"):
            cells = depth["depth"].get(name, {})
            ratio = cells.get("large_over_small")
            cpu_ratio = cells.get("cpu_large_over_small")
            note = f"per CPU-second of claiming and settling (top-up inserts taken out): {_f(cpu_ratio, 2)}"
            if cells.get("pair_ratios"):
                note += "; repetitions " + ", ".join(_f(r, 2) for r in cells["pair_ratios"])
            if large < 1_000_000:
                note += "; quick mode: the goal is defined at 1,000,000"
            rows.append(
                (
                    f"depth: {name} claim rate at {large:,} / at {small:,} ready",
                    f"≥ {GOALS['depth_ratio']}" if name == "shardq" else "(reference)",
                    _f(ratio, 2),
                    (ratio is not None and ratio >= GOALS["depth_ratio"]) if name == "shardq" else None,
                    note,
                )
            )
        reaper = depth.get("reaper", {})
        if str(small) in reaper and str(large) in reaper:
            a, b = reaper[str(small)]["median_seconds"], reaper[str(large)]["median_seconds"]
            ba, bb = reaper[str(small)].get("candidate_blocks"), reaper[str(large)].get("candidate_blocks")
            note = (
                f"run_once {a * 1e3:.0f} → {b * 1e3:.0f} ms ({b / a:.2f}; wall time on a shared machine), "
                f"nothing expired {reaper[str(small)]['idle_median_seconds'] * 1e3:.0f} → "
                f"{reaper[str(large)]['idle_median_seconds'] * 1e3:.0f} ms"
            )
            if ba and bb:
                measured, met = f"{bb / ba:.2f} (buffers {ba:,.0f} → {bb:,.0f})", bb / ba <= GOALS["reaper_ratio"]
            else:
                measured, met = f"{b / a:.2f}", b / a <= GOALS["reaper_ratio"]
            rows.append(
                (
                    f"reaper: work at {large:,} / at {small:,} rows, same 1,000 expired leases",
                    f"≤ {GOALS['reaper_ratio']}",
                    measured,
                    met,
                    note,
                )
            )
    spark = (results.get("enqueue") or {}).get("spark") or {}
    over_floor = _spark_over_floor(spark)
    if over_floor is not None:
        # Issue 20: enqueue_dataframe against a COPY of the same rows straight into shardq_tasks.
        rows.append(
            (
                "Spark → shardq (enqueue_dataframe) / COPY into shardq_tasks",
                f"≥ {GOALS['spark_ratio']}",
                _f(over_floor, 2),
                over_floor >= GOALS["spark_ratio"],
                f"{spark.get('rows', 0):,} rows, loadtest/spark_enqueue.py; × plain Spark append: "
                f"{_f(spark['ratio'], 2)} (COPY itself {_f(spark['floor_ratio'], 2)})",
            )
        )
    elif "ratio" in spark:
        rows.append(
            (
                "Spark → shardq / plain-table append (no COPY floor measured)",
                "–",
                _f(spark["ratio"], 2),
                None,
                f"{spark.get('rows', 0):,} rows, loadtest/spark_enqueue.py",
            )
        )
    api = results.get("task-api")
    if api and "drains" in api:
        ratio = api["app_over_bare_paired"]
        rows.append(
            (
                "task API: app dispatch / bare handler drain (paired median)",
                f"≥ {GOALS['app_vs_bare']}",
                _f(ratio, 2),
                ratio is not None and ratio >= GOALS["app_vs_bare"],
                f"{api['tasks']:,} tasks of {api['payload_bytes']} bytes, pairs "
                + ", ".join(_f(p["ratio"], 2) for p in api["drains"]),
            )
        )
        ratio = api["defer_many_over_enqueue_many_paired"]
        rows.append(
            (
                "task API: defer_many / enqueue_many (paired median)",
                f"≥ {GOALS['defer_vs_enqueue']}",
                _f(ratio, 2),
                ratio >= GOALS["defer_vs_enqueue"],
                "pairs " + ", ".join(_f(p["ratio"], 2) for p in api["enqueues"]),
            )
        )
    flow = results.get("flow")
    if flow and "configs" in flow:
        for config in flow["configs"]:
            ratio = config["limited_over_unlimited_paired"]
            rows.append(
                (
                    f"flow control: --concurrency = total ({config['total_concurrency']}) / no limit, "
                    f"{config['threads_per_worker']} threads per worker, "
                    f"{_f(config['handler_seconds'] * 1e3, 0)} ms tasks (paired median)",
                    f"≥ {GOALS['flow_limited_vs_unlimited']}",
                    _f(ratio, 2),
                    ratio is not None and ratio >= GOALS["flow_limited_vs_unlimited"],
                    "pairs " + ", ".join(_f(p["ratio"], 2) for p in config["pairs"]),
                )
            )
        rate = flow["rate"]
        sustained = rate.get("sustained_per_s")
        rows.append(
            (
                f"flow control: --rate {rate['limit']} sustained starts/s",
                f"{_f(GOALS['flow_rate_low'])}–{_f(GOALS['flow_rate_high'])}",
                _f(sustained),
                sustained is not None and GOALS["flow_rate_low"] <= sustained <= GOALS["flow_rate_high"] * 1.01,
                f"{rate['tasks']:,} tasks, 4 workers; busiest 1-s window {rate.get('busiest_second')} "
                f"(burst {rate['limit']})",
            )
        )
    chaos = results.get("chaos")
    if chaos and "lost" in chaos:
        rows.append(
            (
                "chaos: tasks lost after SIGKILL",
                "0",
                str(chaos["lost"]),
                chaos["lost"] == 0,
                (
                    f"{chaos['recovered']} tasks recovered in {_f(chaos['recovery_seconds'], 1)} s, "
                    f"{chaos['duplicates']} ran twice"
                ),
            )
        )
    kept = results.get("history")
    if kept and "pairs" in kept:
        ratio = kept["keep_over_none_paired"]
        rows.append(
            (
                "keeping every finished task: drain keeping all / keeping none (paired median)",
                f"≥ {GOALS['history_keep_vs_none']}",
                _f(ratio, 2),
                ratio is not None and ratio >= GOALS["history_keep_vs_none"],
                f"{kept['tasks']:,} no-op tasks, 4 workers, pairs in ABBA order",
            )
        )
    sweep = results.get("sweep")
    if sweep and "pairs" in sweep:
        ratio = sweep["on_over_off_paired"]
        rows.append(
            (
                "lease sweeping in every worker: drain with / without (paired median)",
                f"≥ {GOALS['sweep_on_vs_off']}",
                _f(ratio, 2),
                ratio is not None and ratio >= GOALS["sweep_on_vs_off"],
                f"{sweep['tasks']:,} no-op tasks, 4 workers, pairs in ABBA order",
            )
        )
        lone = sweep.get("chaos_no_reaper") or {}
        if "lost" in lone:
            rows.append(
                (
                    "chaos without a reaper: tasks lost after SIGKILL",
                    "0",
                    str(lone["lost"]),
                    lone["lost"] == 0,
                    (
                        f"{lone['recovered']} tasks recovered by the workers' sweeps in "
                        f"{_f(lone['recovery_seconds'], 1)} s (lease {lone['lease_seconds']} s), "
                        f"{lone['duplicates']} ran twice"
                    ),
                )
            )
    rows += latency.goals(results)
    return rows


def headline(results: dict) -> str:
    burn = results.get("burn-down") or {}
    steady = results.get("steady") or {}
    rows = []
    names = list(burn.get("rates", {}))
    for name in steady:
        base = name.removesuffix("+poll")
        if name not in names and base not in names:
            names.append(name)
    for name in names:
        rate = burn.get("rates", {}).get(name)
        ratio = burn.get("ratio_to_raw", {}).get(name)
        cell = steady.get(name) or {}
        lat = cell.get("latency") or {}
        cpu = burn.get("cpu_us_per_task", {}).get(name)
        rows.append(
            [
                f"**{name}**" if name == "shardq" else name,
                _f(rate),
                _f(ratio, 2),
                _f(cpu),
                _f(cell.get("achieved_rate")) if cell else "–",
                _f(lat.get("p50_ms"), 1),
                _f(lat.get("p99_ms"), 1),
            ]
        )
        if name == "shardq" and "shardq+poll" in steady:
            c = steady["shardq+poll"]
            lat = c.get("latency") or {}
            rows.append(
                [
                    "shardq, polling only (--no-listen)",
                    "–",
                    "–",
                    "–",
                    _f(c.get("achieved_rate")),
                    _f(lat.get("p50_ms"), 1),
                    _f(lat.get("p99_ms"), 1),
                ]
            )
    return _table(
        [
            "contender",
            "burn-down tasks/s",
            "× raw bound",
            "CPU µs/task (client+server)",
            "steady tasks/s (2,000 offered)",
            "enqueue→start p50 ms",
            "p99 ms",
        ],
        rows,
    )


def write(results: dict, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    plots = _plots(results, out)
    meta = results["meta"]
    m = meta["machine"]
    v = m["versions"]
    parts = [
        "# shardq load test",
        "",
        (
            f"Run {meta['started']} ({'quick' if meta['quick'] else 'full'} mode, {meta['seconds']:.0f} s). "
            f"{m['nproc']} CPUs ({m['cpu_model']}), {m['memory_gib']} GiB; "
            f"PostgreSQL {v['postgresql']} (embedded), Python {v['python']}, shardq {v['shardq']}, psycopg {v['psycopg']}, "
            f"pgqueuer {v['pgqueuer']} (asyncpg {v['asyncpg']}), procrastinate {v['procrastinate']}."
        ),
        (
            f"Load average at start {_load(m.get('loadavg_at_start'))}, at end {_load(meta.get('loadavg_at_end'))}: "
            "the machine is shared, so compare ratios within this run, not absolute figures across runs."
        ),
        *[f"Note: {note}" for note in meta.get("notes", [])],
        "",
        (
            "Same server, a fresh database per contender per cell, `VACUUM ANALYZE` before timing, "
            f"{results.get('burn-down', {}).get('processes', 4)} worker processes and batch "
            f"{results.get('burn-down', {}).get('batch', 100)} for every contender (procrastinate claims one job "
            "per fetch by design). Process start-up is never timed: every process connects, then waits for a "
            "common start signal."
        ),
        "",
        "## Headline",
        "",
        headline(results),
        "",
        "## Goals",
        "",
        _table(
            ["goal", "target", "measured", "met", "note"],
            [[g, t, m_, "yes" if ok else ("no" if ok is False else "–"), n] for g, t, m_, ok, n in goals(results)],
        ),
        "",
        (
            "CPU µs/task is the worker processes' own CPU (rusage) plus every PostgreSQL process's CPU during "
            "the cell (/proc), per task executed. On a shared machine it moves far less than tasks/s does, and on "
            "a quiet one a CPU-bound drain approaches (cores × 10⁶) / (CPU µs/task) tasks/s."
        ),
        "",
    ]
    parts += _burn_section(results.get("burn-down"), plots)
    parts += _steady_section(results.get("steady"), plots)
    parts += _idle_section(results.get("idle"), plots)
    parts += latency.section(results, _table)
    parts += _depth_section(results.get("depth"), plots)
    parts += _enqueue_section(results.get("enqueue"), plots)
    parts += _task_api_section(results.get("task-api"))
    parts += _flow_section(results.get("flow"))
    parts += _chaos_section(results.get("chaos"), plots)
    parts += _sweep_section(results.get("sweep"))
    errors = results.get("errors") or {}
    if errors:
        parts += ["## Scenarios that failed", ""] + [f"- {k}: `{v}`" for k, v in errors.items()] + [""]
    parts += [
        "## Reproduce",
        "",
        "```",
        "pip install -e '.[dev,bench]'",
        "python -m loadtest            # full run, ~15-20 min",
        "python -m loadtest --quick    # < 2 min",
        "python -m loadtest --scenarios burn-down,steady",
        "```",
        "",
        "Raw numbers: `results.json` next to this file.",
        "",
    ]
    path = out / "report.md"
    path.write_text("\n".join(parts))
    return path


def _load(values) -> str:
    return "/".join(f"{x:.1f}" for x in values) if values else "–"


def _burn_section(burn, plots) -> list[str]:
    if not burn or "rates" not in burn:
        return []
    rows = []
    for name, rate in burn["rates"].items():
        cells = [p[name] for p in burn["pairs"]] if name in ("raw-bound", "shardq") else [burn["peers"][name]]
        rows.append(
            [
                name,
                _f(rate),
                _f(burn["ratio_to_raw"][name], 2),
                "yes" if all(c["drained"] for c in cells) else "no (capped)",
                ", ".join(_f(c["rate"]) for c in cells),
                _f(statistics_median([c["bulk_enqueue_rate"] for c in cells])),
                burn["notes"].get(name, ""),
            ]
        )
    paired = burn["shardq_over_raw_paired"]
    out = [
        "## Burn-down",
        "",
        (
            f"{burn['tasks']:,} no-op tasks pre-inserted with each system's bulk enqueue, then drained. "
            "tasks/s = executed / (last execution start − release). A cell that does not drain within its cap "
            "reports the rate over what it did."
        ),
        "",
        _table(
            ["contender", "tasks/s (median)", "× raw", "drained", "each run", "bulk enqueue tasks/s", "settings"], rows
        ),
        "",
        (
            f"shardq / raw bound, paired within each repetition: median {_f(paired['median'], 2)} "
            f"(min {_f(paired['min'], 2)}, max {_f(paired['max'], 2)}); raw bound spread between repetitions "
            f"{_f((burn.get('raw_spread') or 0) * 100, 0)} % (noise)."
        ),
        "",
    ]
    out += [f"![{k}]({k}.png)" for k in ("burn_down", "burn_progress") if k in plots] + [""]
    return out


def statistics_median(values):
    import statistics

    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _steady_section(steady, plots) -> list[str]:
    if not steady:
        return []
    rows = []
    for name, c in steady.items():
        lat, db = c.get("latency") or {}, c.get("latency_db_clock") or {}
        rows.append(
            [
                name,
                _f(c["offered_rate"]),
                _f(c["achieved_rate"]),
                _f(c.get("backlog")),
                _f(lat.get("p50_ms"), 1),
                _f(lat.get("p95_ms"), 1),
                _f(lat.get("p99_ms"), 1),
                _f(lat.get("max_ms"), 1),
                _f(db.get("p99_ms"), 1),
            ]
        )
    out = [
        "## Steady state",
        "",
        (
            "One producer process sends the tasks due every 5 ms (one enqueue call each) at the offered rate while "
            "4 worker processes run; latency = handler start − producer clock at send (same machine clock). "
            "The last column measures from the row's `created_at` (database clock) instead. First second left out."
        ),
        "",
        _table(
            [
                "contender",
                "offered/s",
                "executed/s",
                "backlog at end",
                "p50 ms",
                "p95 ms",
                "p99 ms",
                "max ms",
                "p99 from created_at ms",
            ],
            rows,
        ),
        "",
    ]
    if "steady_latency" in plots:
        out += ["![steady latency](steady_latency.png)", ""]
    return out


def _idle_section(idle, plots) -> list[str]:
    if not idle:
        return []
    rows = []
    for name, c in idle.items():
        lat = c.get("latency") or {}
        rows.append(
            [
                name,
                lat.get("n", 0),
                _f(lat.get("p50_ms")),
                _f(lat.get("max_ms")),
                ", ".join(_f(v) for v in c.get("values_ms", [])),
            ]
        )
    return [
        "## Idle queue",
        "",
        (
            "4 idle worker processes (shardq, and pgqueuer-tuned as the reference); single tasks enqueued one at a time, spaced so that polling workers have backed "
            "off to their longest interval (1 s) or listening workers are parked on LISTEN."
        ),
        "",
        _table(["worker", "samples", "p50 ms", "worst ms", "each (ms)"], rows),
        "",
    ]


def _depth_section(depth, plots) -> list[str]:
    if not depth:
        return []
    small, large = depth["sizes"]
    rows = []
    for name, cells in depth["depth"].items():
        rows.append(
            [
                name,
                _f(cells[str(small)]["window_rate"]),
                _f(cells[str(large)]["window_rate"]),
                _f(cells.get("large_over_small"), 2),
                f"{_f(cells[str(small)].get('cpu_us_per_task'))} / {_f(cells[str(large)].get('cpu_us_per_task'))}",
                f"{_f(cells[str(small)].get('claim_cpu_us_per_task'))} / "
                f"{_f(cells[str(large)].get('claim_cpu_us_per_task'))}",
            ]
        )
    out = [
        "## Depth",
        "",
        (
            "4 processes claim and finish no-op tasks for a fixed time while the parent tops the table up to its "
            "depth (its inserts count in the server CPU); rate over the last 80 % of each window; windows alternate "
            "between the two tables in ABBA order (costs drift upward as the tables churn, so a fixed order would "
            "charge the drift to one depth); tasks/s columns are medians per depth, the ratio is the median of "
            "the per-repetition ratios."
        ),
        "",
        _table(
            [
                "contender",
                f"tasks/s at {small:,} ready",
                f"at {large:,} ready",
                "ratio",
                "CPU µs/task",
                "without the top-up's inserts",
            ],
            rows,
        ),
        "",
    ]
    reaper = depth.get("reaper") or {}
    if reaper:
        rrows = []
        for size, r in reaper.items():
            rrows.append(
                [
                    f"{int(size):,}",
                    _f(r["table"].get("live")),
                    _f(r["runs"][-1]["reaped"]),
                    _f(r["median_seconds"] * 1e3, 1),
                    _f(r["idle_median_seconds"] * 1e3, 1),
                    _f(r.get("candidate_blocks")),
                ]
            )
        out += [
            "### Reaper cost",
            "",
            (
                "`Reaper.run_once()` over every bucket with ~1,000 expired leases (claimed with a 50 ms lease), "
                "and with none."
            ),
            "",
            _table(
                [
                    "tasks in table",
                    "live rows",
                    "expired leases reaped",
                    "run_once ms",
                    "run_once ms, nothing expired",
                    "buffers touched finding them",
                ],
                rrows,
            ),
            "",
        ]
    out += [f"![{k}]({k}.png)" for k in ("depth", "reaper") if k in plots] + [""]
    return out


def _enqueue_section(enqueue, plots) -> list[str]:
    if not enqueue:
        return []
    rows = [[k, _f(v["single_rate"]), _f(v["bulk_rate"])] for k, v in enqueue.items() if "single_rate" in v]
    out = [
        "## Enqueue",
        "",
        "One process; *single* = one statement per task; *bulk* = the system's batch API, 1,000 tasks per call.",
        "",
        _table(["system", "single tasks/s", "bulk tasks/s"], rows),
        "",
    ]
    spark = enqueue.get("spark") or {}
    out += _spark_section(spark)
    if "enqueue" in plots:
        out += ["![enqueue](enqueue.png)", ""]
    return out


def _task_api_section(api) -> list[str]:
    if not api or "drains" not in api:
        return []
    drain_rows = [
        [i + 1, _f(p["bare"]["rate"]), _f(p["app"]["rate"]), _f(p["ratio"], 2)] for i, p in enumerate(api["drains"])
    ]
    enqueue_rows = [
        [i + 1, _f(p["enqueue_many"]), _f(p["defer_many"]), _f(p["ratio"], 2)] for i, p in enumerate(api["enqueues"])
    ]
    return [
        "## Task API",
        "",
        f"The same {api['tasks']:,} tasks ({api['payload_bytes']}-byte JSON calls) drained by 4 worker processes "
        "with a bare `fn(task)` handler and with `App.dispatch` (JSON decode, dispatch by name, keyword "
        "call), pairs in ABBA order; then `AppTask.defer_many` (argument check and JSON encoding included) "
        "against `Client.enqueue_many` of payloads of the same size, in alternating chunks of 1,000 in one "
        "database per repetition.",
        "",
        _table(["pair", "bare tasks/s", "app tasks/s", "app / bare"], drain_rows),
        "",
        _table(["pair", "enqueue_many tasks/s", "defer_many tasks/s", "defer / enqueue"], enqueue_rows),
        "",
    ]


def _flow_section(flow) -> list[str]:
    if not flow or "configs" not in flow:
        return []
    out = [
        "## Flow control",
        "",
        "Each row: the same tasks drained by 4 worker processes from a queue without a limit and from the same "
        "queue with `--concurrency` equal to the workers' total handler threads, pairs in ABBA order. Each worker "
        "then holds one slot per handler, so the limit does not bind it and it claims ahead as without a limit; "
        "the difference is the per-task slot bookkeeping and the start of the drain, when a worker takes its "
        "slots (docs/flow-control.md).",
        "",
    ]
    rows = []
    for config in flow["configs"]:
        for i, p in enumerate(config["pairs"]):
            rows.append(
                [
                    config["threads_per_worker"],
                    _f(config["handler_seconds"] * 1e3, 0),
                    i + 1,
                    _f(p["unlimited"]["rate"]),
                    _f(p["limited"]["rate"]),
                    _f(p["ratio"], 2),
                ]
            )
    out += [
        _table(["threads/worker", "task ms", "pair", "no limit tasks/s", "limited tasks/s", "limited / none"], rows),
        "",
    ]
    rate = flow["rate"]
    out += [
        f"`--rate {rate['limit']}` (burst {rate['limit']}), {rate['tasks']:,} no-op tasks, 4 workers of 4 threads: "
        f"{_f(rate.get('sustained_per_s'))} starts/s from 3 s in to the last start; busiest 1-s window "
        f"{rate.get('busiest_second')} starts (at most {rate['limit']} + burst {rate['limit']}); "
        f"{rate['executed']:,} run in {_f(rate['elapsed'], 1)} s.",
        "",
    ]
    return out


def _sweep_section(sweep) -> list[str]:
    if not sweep or "pairs" not in sweep:
        return []
    rows = [[i + 1, _f(p["off"]["rate"]), _f(p["on"]["rate"]), _f(p["ratio"], 2)] for i, p in enumerate(sweep["pairs"])]
    out = [
        "## Lease sweeping in the workers",
        "",
        f"The same {sweep['tasks']:,} no-op tasks drained by 4 worker processes with each worker's lease sweeper "
        "on (the default) and off (`--no-sweep`), pairs in ABBA order: what sweeping costs a drain "
        "(docs/reliability.md).",
        "",
        _table(["pair", "sweep off tasks/s", "sweep on tasks/s", "on / off"], rows),
        "",
    ]
    lone = sweep.get("chaos_no_reaper") or {}
    if "lost" in lone:
        out += [
            (
                f"Workers only, no `shardq reap`: 4 `shardq work` processes (lease {lone['lease_seconds']} s) drain "
                f"{lone['tasks']:,} tasks; one is SIGKILLed once a third is done. Lost {lone['lost']}, "
                f"{lone['recovered']} recovered by the other workers' sweeps, the first "
                f"{_f(lone['first_recovery_seconds'], 1)} s and the last {_f(lone['recovery_seconds'], 1)} s after the "
                f"kill; {lone['duplicates']} ran twice."
            ),
            "",
        ]
    return out


def _chaos_section(chaos, plots) -> list[str]:
    if not chaos or "tasks" not in chaos:
        return []
    out = [
        "## Chaos: SIGKILL a worker mid-drain",
        "",
        (
            f"4 `shardq work` processes (lease {chaos['lease_seconds']} s) and `shardq reap --interval "
            f"{chaos['reap_interval']}` drain {chaos['tasks']:,} tasks; one worker is SIGKILLed once a third is done."
        ),
        "",
        _table(
            [
                "killed after s",
                "recovered tasks",
                "first recovery s",
                "all recovered s",
                "duplicate executions",
                "lost",
                "drain s",
            ],
            [
                [
                    _f(chaos["killed_after_seconds"], 2),
                    chaos["recovered"],
                    _f(chaos["first_recovery_seconds"], 2),
                    _f(chaos["recovery_seconds"], 2),
                    chaos["duplicates"],
                    chaos["lost"],
                    _f(chaos["drain_seconds"], 1),
                ]
            ],
        ),
        "",
        (
            "Recovery is bounded by lease + reaper interval + the first retry's backoff (full jitter over 1 s). "
            "Duplicates are tasks the killed worker had started but not yet acknowledged (at-least-once)."
        ),
        "",
    ]
    if "chaos" in plots:
        out += ["![chaos](chaos.png)", ""]
    return out


# -- plots ----------------------------------------------------------------------------------
def _plots(results: dict, out: Path) -> set[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return set()
    made: set[str] = set()

    def save(fig, name: str) -> None:
        fig.tight_layout()
        fig.savefig(out / f"{name}.png", dpi=110)
        plt.close(fig)
        made.add(name)

    burn = results.get("burn-down")
    if burn and "rates" in burn:
        names = list(burn["rates"])
        rates = [burn["rates"][n] for n in names]
        fig, ax = plt.subplots(figsize=(8, 0.5 * len(names) + 1.5))
        colors = ["#444" if n == "raw-bound" else "#1f77b4" if n == "shardq" else "#bbb" for n in names]
        ax.barh(names[::-1], rates[::-1], color=colors[::-1])
        for i, n in enumerate(names[::-1]):
            ax.text(burn["rates"][n], i, f" {burn['rates'][n]:,.0f} ({burn['ratio_to_raw'][n]:.2f}×)", va="center")
        ax.set_xlabel("tasks/s (burn-down, no-op tasks)")
        ax.set_xlim(0, max(rates) * 1.35 if rates else 1)
        save(fig, "burn_down")
        fig, ax = plt.subplots(figsize=(8, 4.5))
        series = {"raw-bound": burn["pairs"][0]["raw-bound"], "shardq": burn["pairs"][0]["shardq"], **burn["peers"]}
        for name, cell in series.items():
            xs = [s[0] for s in cell["samples"]]
            ys = [s[1] for s in cell["samples"]]
            ax.plot(xs, ys, label=name)
        ax.set_xlabel("seconds since release")
        ax.set_ylabel("tasks executed")
        ax.legend()
        save(fig, "burn_progress")
    steady = results.get("steady")
    if steady:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for name, cell in steady.items():
            sample = sorted(cell.get("latency_sample") or [])
            if not sample:
                continue
            ys = [(i + 1) / len(sample) for i in range(len(sample))]
            ax.plot([s * 1e3 for s in sample], ys, label=name)
        ax.set_xscale("log")
        ax.axvline(GOALS["steady_p99_ms"], color="red", linestyle=":", label="50 ms")
        ax.axhline(0.99, color="grey", linestyle=":")
        ax.set_xlabel("enqueue→start latency, ms (log)")
        ax.set_ylabel("fraction of tasks")
        ax.legend()
        save(fig, "steady_latency")
    latency.plot(results, out, plt, save)
    depth = results.get("depth")
    if depth:
        small, large = depth["sizes"]
        fig, ax = plt.subplots(figsize=(7, 4))
        names = list(depth["depth"])
        width = 0.35
        for j, size in enumerate((small, large)):
            ax.bar(
                [i + j * width for i in range(len(names))],
                [depth["depth"][n][str(size)]["window_rate"] for n in names],
                width,
                label=f"{size:,} ready",
            )
        ax.set_xticks([i + width / 2 for i in range(len(names))], names)
        ax.set_ylabel("tasks/s")
        ax.legend()
        save(fig, "depth")
        reaper = depth.get("reaper") or {}
        if reaper:
            fig, ax = plt.subplots(figsize=(6, 4))
            sizes = list(reaper)
            ax.bar([f"{int(s):,} rows\n1k expired" for s in sizes], [reaper[s]["median_seconds"] * 1e3 for s in sizes])
            ax.bar(
                [f"{int(s):,} rows\nnone expired" for s in sizes],
                [reaper[s]["idle_median_seconds"] * 1e3 for s in sizes],
                color="#bbb",
            )
            ax.set_ylabel("Reaper.run_once, ms")
            save(fig, "reaper")
    enqueue = results.get("enqueue")
    if enqueue:
        names = [k for k, v in enqueue.items() if "single_rate" in v]
        if names:
            fig, ax = plt.subplots(figsize=(7, 4))
            width = 0.35
            ax.bar(list(range(len(names))), [enqueue[n]["single_rate"] for n in names], width, label="single")
            ax.bar(
                [i + width for i in range(len(names))], [enqueue[n]["bulk_rate"] for n in names], width, label="bulk"
            )
            ax.set_xticks([i + width / 2 for i in range(len(names))], names)
            ax.set_yscale("log")
            ax.set_ylabel("tasks/s enqueued (log)")
            ax.legend()
            save(fig, "enqueue")
    chaos = results.get("chaos")
    if chaos and chaos.get("timeline"):
        fig, ax = plt.subplots(figsize=(8, 4))
        xs = [t[0] for t in chaos["timeline"]]
        ax.bar(xs, [t[1] for t in chaos["timeline"]], width=0.1, label="first attempt", color="#1f77b4")
        ax.bar(
            xs,
            [t[2] for t in chaos["timeline"]],
            width=0.1,
            bottom=[t[1] for t in chaos["timeline"]],
            label="retry after SIGKILL",
            color="#d62728",
        )
        if chaos.get("killed_after_seconds") is not None:
            ax.axvline(chaos["killed_after_seconds"], color="black", linestyle="--", label="SIGKILL")
        ax.set_xlabel("seconds")
        ax.set_ylabel("executions per 100 ms")
        ax.legend()
        save(fig, "chaos")
    return made


def _spark_over_floor(spark: dict) -> float | None:
    """enqueue_dataframe's rows/s over the COPY floor's, in the same run (None: not measured)."""
    if spark.get("shardq_over_floor") is not None:
        return float(spark["shardq_over_floor"])
    if spark.get("floor_rows_per_s") and spark.get("shardq_rows_per_s"):
        return spark["shardq_rows_per_s"] / spark["floor_rows_per_s"]
    return None


def _spark_section(spark: dict) -> list[str]:
    """Spark -> shardq against the plain append and the COPY floor (loadtest/spark_enqueue.py)."""
    if "ratio" not in spark:
        return ["Spark JDBC: " + ", ".join(f"{k} = {v}" for k, v in spark.items()), ""]
    runs = spark.get("shardq_runs") or []
    split = ", ".join(f"write {r['write_seconds']:.2f} s + merge {r['merge_seconds']:.2f} s" for r in runs)
    over_floor = _spark_over_floor(spark)
    writer = spark.get("writer", "staging + chunked merge")
    rows = [
        ["Spark JDBC append to a plain table", _f(spark["plain_rows_per_s"]), "1.00", "–"],
        [
            f"shardq.spark.enqueue_dataframe ({writer})",
            _f(spark["shardq_rows_per_s"]),
            _f(spark["ratio"], 2),
            _f(over_floor, 2),
        ],
    ]
    if "floor_rows_per_s" in spark:
        rows.append(
            [
                "floor: psycopg COPY (CSV) straight into shardq_tasks (no Spark, no re-run safety)",
                _f(spark["floor_rows_per_s"]),
                _f(spark["floor_ratio"], 2),
                "1.00",
            ]
        )
    return [
        f"Spark, {spark.get('rows', 0):,} rows of 64-byte payloads, median of {spark.get('rounds', 0)} rounds"
        f"{' (ids from a row key)' if spark.get('row_key') else ''}:",
        "",
        _table(["path", "rows/s", "× plain", "× COPY floor"], rows),
        "",
        f"shardq's rounds: {split}." if split else "",
        "",
    ]
