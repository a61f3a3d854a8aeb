"""``python -m loadtest.durable_steps [--tasks N] [--concurrency C] [--rounds R]``: a three-step
durable task (``ctx.step`` three times, docs/durable.md) against a three-step workflow chain and
three plain tasks, the same no-op work, paired in one run on one embedded PostgreSQL: each round
runs durable, chain, plain, then the reverse, each on a fresh database, worked off by one
``app.work(until_empty=True)`` worker with ``C`` threads. Prints units (a durable task, a chain,
three plain tasks) per second and the durable / chain ratio of each pair. Nothing asserts."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

KINDS = ("durable", "chain", "plain")


def one(url: str, kind: str, tasks: int, concurrency: int) -> float:
    """Enqueue ``tasks`` units of ``kind``, work them off; units per second of the work phase."""
    import shardq

    app = shardq.App(url)

    @app.task(name="noop", queue="bench")
    def noop() -> None:
        pass

    @app.task(name="durable", queue="bench", pass_context=True)
    def durable(ctx: shardq.TaskContext) -> None:
        ctx.step("a", int, 1)
        ctx.step("b", int, 2)
        ctx.step("c", int, 3)

    try:
        if kind == "durable":
            durable.defer_many([{}] * tasks)
        elif kind == "plain":
            noop.defer_many([{}] * (3 * tasks))
        else:
            for i in range(tasks):
                workflow = app.workflow(f"chain-{i}")
                workflow.chain(noop.step(), noop.step(), noop.step())
                workflow.enqueue()
        started = time.perf_counter()
        app.work(until_empty=True, concurrency=concurrency)
        return tasks / (time.perf_counter() - started)
    finally:
        app.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.durable_steps", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=2_000, help="units per run")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)

    from loadtest.env import Bench, loadavg

    bench = Bench.start()
    rates: dict[str, list[float]] = {kind: [] for kind in KINDS}
    ratios: list[float] = []
    try:
        for _ in range(args.rounds):
            for kind in (*KINDS, *reversed(KINDS)):
                url = bench.shardq_database(f"durable_{kind}")
                try:
                    rates[kind].append(one(url, kind, args.tasks, args.concurrency))
                finally:
                    bench.drop(url)
                print(f"{kind}: {rates[kind][-1]:,.0f} units/s", file=sys.stderr, flush=True)
            ratios += [d / c for d, c in zip(rates["durable"][-2:], rates["chain"][-2:], strict=True)]
    finally:
        bench.close()
    summary: dict[str, Any] = {kind: round(statistics.median(v)) for kind, v in rates.items()}
    summary["durable_over_chain"] = [round(r, 3) for r in ratios]
    summary["loadavg"] = loadavg()
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
