"""``python -m loadtest.otel_instrument [--ref REF] [--tasks N] [--rounds R] [--batch] [--profile]``:
the CPU that shardq.contrib.otel's worker side costs per task, without a database.

Per task: the ``process`` span around a no-op function (:meth:`OpenTelemetry.running`), the
``acked`` event, and per 100 tasks a ``settled`` event (the settle span), as a worker calls them.
The SDK is set up as ``loadtest.app_burn`` sets it: a ``TracerProvider`` (everything recorded, or
``--sample F``) with a ``BatchSpanProcessor`` whose exporter drops the spans. ``--batch``: the tasks
were sent by one ``defer_many`` (a link, as in app_burn); else each by its own ``defer`` (a
parent). With ``--ref``, that ref's ``otel.py`` is loaded beside this checkout's and the two run
interleaved in one process, each round both ways; figures are this thread's CPU per task,
medians over rounds, and the median of per-round ratios this / ref. ``--profile``: a cProfile of
this checkout's instrument instead, the top functions by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import json
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


class _Handle:
    __slots__ = ("attempt", "id", "queue")

    def __init__(self, queue: str) -> None:
        self.id, self.queue, self.attempt = str(uuid.uuid4()), queue, 1


def _load(path: Path, name: str) -> Any:
    """``path`` (an otel.py) as module ``shardq.contrib.<name>`` (its relative imports then resolve)."""
    spec = importlib.util.spec_from_file_location(f"shardq.contrib.{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _provider(sample: float | None) -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    class Drop(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    provider = TracerProvider() if sample is None else TracerProvider(sampler=ParentBased(TraceIdRatioBased(sample)))
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    return provider


def _carrier(instrument: Any, batch: bool) -> dict[str, str]:
    """What a send stores: its traceparent (and the batch mark for a ``defer_many``)."""
    with instrument.sending("bench.noop", "bench", 2 if batch else 1) as carrier:
        return dict(carrier or {})


def _burn(instrument: Any, tasks: int, carrier: dict[str, str]) -> float:
    """Run ``tasks`` no-op tasks through ``instrument`` as a worker would; this thread's CPU, µs per task."""
    handles = [_Handle("bench") for _ in range(tasks)]

    def noop() -> None:
        return None

    started = time.thread_time()
    for start in range(0, tasks, 100):
        chunk = handles[start : start + 100]
        for handle in chunk:
            instrument.running(noop, is_async=False, task="bench.noop", handle=handle, carrier=carrier)()
        for handle in chunk:
            instrument.on_event("acked", handle, {})
        instrument.on_event("settled", None, {"counts": {("acked", "bench"): len(chunk)}})
    return (time.thread_time() - started) / tasks * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.otel_instrument", description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", help="a git ref whose otel.py runs beside this checkout's")
    parser.add_argument("--tasks", type=int, default=3_000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--sample", type=float, help="keep this fraction of traces (default: all)")
    parser.add_argument("--batch", action="store_true", help="tasks of one defer_many (a link, not a parent)")
    parser.add_argument("--profile", action="store_true", help="cProfile this checkout's instrument")
    args = parser.parse_args(argv)

    from opentelemetry import trace

    trace.set_tracer_provider(_provider(args.sample))  # the global one, for the propagator's spans
    versions = {"this": _load(REPO / "src" / "shardq" / "contrib" / "otel.py", "otel_this")}
    if args.ref:
        with tempfile.TemporaryDirectory() as tmp:
            old = Path(tmp) / "otel.py"
            old.write_text(
                subprocess.run(
                    ["git", "-C", str(REPO), "show", f"{args.ref}:src/shardq/contrib/otel.py"],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
            )
            versions["ref"] = _load(old, "otel_ref")
    instruments = {label: module.OpenTelemetry(_provider(args.sample)) for label, module in versions.items()}
    carriers = {label: _carrier(instrument, args.batch) for label, instrument in instruments.items()}

    if args.profile:
        instrument = instruments["this"]
        _burn(instrument, args.tasks, carriers["this"])  # warm
        profile = cProfile.Profile()
        profile.enable()
        _burn(instrument, args.tasks, carriers["this"])
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
        return 0

    for label, instrument in instruments.items():  # warm every cache and the SDK's first calls
        _burn(instrument, args.tasks, carriers[label])
    rounds: list[dict[str, float]] = []
    for number in range(args.rounds):
        order = list(instruments) if number % 2 == 0 else list(reversed(instruments))
        rounds.append({label: _burn(instruments[label], args.tasks, carriers[label]) for label in order})
    report: dict[str, Any] = {"tasks": args.tasks, "rounds": args.rounds, "batch": args.batch, "sample": args.sample}
    for label in instruments:
        report[f"{label}_us"] = round(statistics.median(r[label] for r in rounds), 2)
    if args.ref:
        report["this_over_ref"] = round(statistics.median(r["this"] / r["ref"] for r in rounds), 3)
        report["this_over_ref_per_round"] = [round(r["this"] / r["ref"], 3) for r in rounds]
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
