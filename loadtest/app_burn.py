"""``python -m loadtest.app_burn [--ref REF] [--tasks N] [--rounds R]``: an app's burn-down with
OpenTelemetry tracing off and on (shardq.contrib.otel), and off against a git ref's code.

Each run is its own process on a fresh database of one embedded PostgreSQL: ``defer_many`` of N
calls of an app task (batches of 1,000), then ``app.work(until_empty=True)`` until they are all
acked (``--work-ms``: each task sleeps that long, I/O-bound work; 0, the default: a no-op task, the
worst case for any per-task cost). Tracing on means the SDK's TracerProvider with a BatchSpanProcessor whose exporter drops
the spans (the cost of making and ending them, not of a collector). Runs are paired within a round
(ref, ref-on, off, on, on, off, ref-on, ref) and the verdicts are the medians over rounds of on /
off, off / ref and, with a ref, the ref's own on / off (the tracing cost before and after, measured
side by side). Prints one JSON document and a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def one(url: str, tasks: int, tracing: bool, work_ms: float = 0.0, sample: float | None = None) -> dict:
    """One run in this process: enqueue and burn ``tasks`` calls; rates in tasks per second.
    ``sample``: keep that fraction of traces (ParentBased(TraceIdRatioBased)); None: all."""
    import shardq

    if tracing:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        from shardq.contrib import otel

        class Drop(SpanExporter):
            def export(self, spans):
                return SpanExportResult.SUCCESS

        provider = (
            TracerProvider() if sample is None else TracerProvider(sampler=ParentBased(TraceIdRatioBased(sample)))
        )
        provider.add_span_processor(BatchSpanProcessor(Drop()))
        otel.instrument(provider)
    app = shardq.App(url)

    @app.task(name="bench.noop", queue="bench")
    def noop(n: int) -> None:
        if work_ms:
            time.sleep(work_ms / 1000)  # I/O-bound work: a thread waits, the GIL is free

    started = time.perf_counter()
    for start in range(0, tasks, 1000):
        noop.defer_many([{"n": i} for i in range(start, min(tasks, start + 1000))])
    enqueued = time.perf_counter() - started
    started, cpu = time.perf_counter(), time.process_time()
    totals = app.work(until_empty=True)
    burned, cpu = time.perf_counter() - started, time.process_time() - cpu
    app.close()
    assert totals.acked == tasks, totals
    # cpu_us: this process's CPU (every thread) per task burned, less sensitive than the rate to
    # other work on a shared machine
    return {"enqueue": tasks / enqueued, "burn": tasks / burned, "cpu_us": cpu / tasks * 1e6}


def _run(src: Path, url: str, tasks: int, tracing: bool, work_ms: float, sample: float | None = None) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), str(REPO)]))
    args = [sys.executable, "-m", "loadtest.app_burn", "--one", url, "--tasks", str(tasks), "--work-ms", str(work_ms)]
    if sample is not None:
        args += ["--sample", str(sample)]
    done = subprocess.run(
        args + (["--tracing"] if tracing else []), cwd=REPO, env=env, check=True, capture_output=True, text=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.app_burn", description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", help="a git ref to pair tracing-off runs against (the code before)")
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--work-ms", type=float, default=0.0, help="each task sleeps this long (0: a no-op task)")
    parser.add_argument("--sample", type=float, help="tracing on keeps this fraction of traces (default: all)")
    parser.add_argument("--one", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--tracing", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one, args.tasks, args.tracing, args.work_ms, args.sample)))
        return 0

    from loadtest.env import Bench
    from loadtest.versus import ref_tree, remove_tree

    bench = Bench.start()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="shardq-app-burn-") as tmp:
        ref_src = ref_tree(args.ref, Path(tmp) / "ref") if args.ref else None
        try:
            order = [
                ("ref", False),
                ("ref-on", True),
                ("off", False),
                ("on", True),
                ("on", True),
                ("off", False),
                ("ref-on", True),
                ("ref", False),
            ]
            for _ in range(args.rounds):
                runs: dict[str, list[dict]] = {"ref": [], "ref-on": [], "off": [], "on": []}
                for label, tracing in order:
                    if label.startswith("ref") and ref_src is None:
                        continue
                    url = bench.shardq_database("appburn")
                    src = ref_src if label.startswith("ref") else REPO / "src"
                    runs[label].append(
                        _run(
                            src,  # type: ignore[arg-type]
                            url,
                            args.tasks,
                            tracing,
                            args.work_ms,
                            args.sample,
                        )
                    )
                    bench.drop(url)
                rounds.append(runs)
        finally:
            bench.close()
            if ref_src is not None:
                remove_tree(ref_src)

    def median(label: str, figure: str) -> list[float]:
        return [statistics.median(r[figure] for r in runs[label]) for runs in rounds if runs[label]]

    report: dict = {"tasks": args.tasks, "work_ms": args.work_ms, "sample": args.sample, "rounds": rounds}
    for figure in ("burn", "enqueue", "cpu_us"):
        off, on = median("off", figure), median("on", figure)
        report[f"{figure}_on_over_off"] = statistics.median(a / b for a, b in zip(on, off))
        if args.ref:
            ref_off, ref_on = median("ref", figure), median("ref-on", figure)
            report[f"{figure}_off_over_ref"] = statistics.median(a / b for a, b in zip(off, ref_off))
            report[f"{figure}_ref_on_over_off"] = statistics.median(a / b for a, b in zip(ref_on, ref_off))
            report[f"{figure}_on_over_ref_on"] = statistics.median(a / b for a, b in zip(on, ref_on))
        report[f"{figure}_on_over_off_per_round"] = [round(a / b, 3) for a, b in zip(on, off)]
    print(json.dumps(report))
    for key, value in report.items():
        if key.endswith(("_off", "_ref", "_ref_on")):
            print(f"{key:28} {value:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
