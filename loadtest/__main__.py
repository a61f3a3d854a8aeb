"""``python -m loadtest [--quick] [--scenarios a,b] [--out loadtest/results]``

Starts one embedded PostgreSQL in a temporary SHARDQ_HOME, runs the chosen scenarios, and writes
``results.json``, ``report.md`` and PNG plots to ``--out``. ``--report-only`` re-renders the
report from an existing ``results.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import signal
import sys
import time
from pathlib import Path

from loadtest import report
from loadtest.env import Bench, loadavg, machine
from loadtest.scenarios import SCENARIOS, Sizes, sizes_dict

DEFAULT_OUT = Path(__file__).resolve().parent / "results"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loadtest", description=__doc__.split("\n\n")[1])
    parser.add_argument("--quick", action="store_true", help="small sizes; the whole run takes under two minutes")
    parser.add_argument(
        "--scenarios",
        default=",".join(SCENARIOS),
        help=f"comma-separated subset of: {', '.join(SCENARIOS)} (default: all)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where results.json, report.md and *.png go")
    parser.add_argument("--report-only", action="store_true", help="re-render report.md from OUT/results.json")
    parser.add_argument("--no-peers", action="store_true", help="burn-down: raw bound and shardq only (no peers)")
    args = parser.parse_args(argv)
    chosen = [s.strip() for s in args.scenarios.replace(" ", ",").split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    args.chosen = chosen
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.report_only:
        print(report.write(json.loads((args.out / "results.json").read_text()), args.out))
        return 0
    # SIGTERM must unwind through the finally below, or the embedded server outlives the run.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sizes = Sizes.quick() if args.quick else Sizes()
    if args.no_peers:
        sizes = dataclasses.replace(sizes, peers=())
    t0 = time.time()

    def log(message: str) -> None:
        print(f"[{time.time() - t0:6.1f}s] {message}", flush=True)

    bench = Bench.start()
    results: dict = {"errors": {}}
    try:
        results["meta"] = {
            "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "quick": args.quick,
            "scenarios": args.chosen,
            "sizes": sizes_dict(sizes),
            "machine": machine(bench.url("postgres")),
        }
        log(f"embedded PostgreSQL up; load average {loadavg()}")
        for name in args.chosen:
            log(f"— {name}")
            try:
                results[name] = SCENARIOS[name](bench, sizes, log)
            except Exception as exc:  # noqa: BLE001 - one broken scenario must not lose the others
                import traceback

                traceback.print_exc()
                results["errors"][name] = f"{type(exc).__name__}: {exc}"
    finally:
        bench.close()
    results["meta"]["seconds"] = time.time() - t0
    results["meta"]["loadavg_at_end"] = loadavg()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    path = report.write(results, args.out)
    log(f"report: {path}")
    print()
    print(report.headline(results))
    print()
    for goal, target, measured, ok, _note in report.goals(results):
        print(f"  {'MET ' if ok else 'MISS' if ok is False else '    '} {goal}: {measured} (target {target})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
