"""``python -m loadtest.idle_stages [--ref REF] [--samples 40] [--workers 4] [--rounds 3]``: where an
idle queue's enqueue→start time goes, stage by stage.

Worker processes listen on an idle queue (wake-ups on, default settings); a producer sends single
tasks, each after a pause of 0.3–0.6 s, with its clock at send in the payload. Each worker marks,
for the task its handler starts, when its wake-up arrived, when its claim statement was sent and
came back, and when the handler started; the producer marks when its enqueue returned. Stages, in
ms after send: ``commit`` (the producer's enqueue returned), ``wake`` (the worker's wait ended),
``claim sent`` and ``claim back`` (the claim round), ``start`` (the handler). With ``--ref``, that
ref's code runs the workers in turn with this checkout's (ref, this, this, ref per round), each on
its own database of one embedded PostgreSQL; p50 / p90 / max per stage and code, over all its
samples. Every process is on one machine, so one clock.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
QUEUE = "idle"
STAGES = ("commit", "wake", "claim_sent", "claim_back", "start")


def _worker(url: str, out: str, ready, stop) -> None:
    """One worker process: marks each stage of the task its handler starts."""
    import shardq
    import shardq.lifecycle.claim as consumer
    import shardq.lifecycle.notify as notify

    marks: list[dict] = []
    current: dict = {}
    wait, claim = notify.Listener.wait, consumer.Consumer.claim

    def marked_wait(self, timeout, stop_event):
        woken = wait(self, timeout, stop_event)
        if woken:
            current["wake"] = time.time()
        return woken

    def marked_claim(self, *args, **kwargs):
        sent = time.time()
        found = claim(self, *args, **kwargs)
        if found.tasks:
            current.update(claim_sent=sent, claim_back=time.time())
        return found

    # Instrument this worker process only: each stage of a wake-up is timed where it happens.
    setattr(notify.Listener, "wait", marked_wait)  # noqa: B010
    setattr(consumer.Consumer, "claim", marked_claim)  # noqa: B010

    def handler(task) -> None:
        marks.append({"sent": float(task.payload.decode()), "start": time.time(), **current})
        current.clear()

    client = shardq.connect(url)
    worker = client.worker([QUEUE], handler)
    import threading

    threading.Thread(target=lambda: (stop.wait(), worker.stop()), daemon=True).start()
    ready.set()
    worker.run(install_signal_handlers=False)
    Path(out).write_text(json.dumps(marks))


def one(url: str, samples: int, workers: int, seed: int) -> list[dict]:
    """One run against ``url`` with the shardq on ``sys.path``: every sample's stages (ms)."""
    import shardq
    from shardq.lifecycle.enqueue import Producer

    client = shardq.connect(url)
    client.migrate()
    client.store.queue_ensure(QUEUE)
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    with tempfile.TemporaryDirectory(prefix="shardq-idle-") as tmp:
        processes, outs = [], []
        for index in range(workers):
            ready, out = context.Event(), str(Path(tmp) / f"w{index}.json")
            process = context.Process(target=_worker, args=(url, out, ready, stop))
            process.start()
            ready.wait(60)
            processes.append(process)
            outs.append(out)
        producer = Producer(client.store, notifier=client.notifier)
        time.sleep(2.0)  # every worker past its first empty round, waiting on LISTEN
        returned: dict[float, float] = {}
        pauses = random.Random(seed)
        for _ in range(samples):
            time.sleep(pauses.uniform(0.3, 0.6))
            sent = time.time()
            producer.enqueue(QUEUE, repr(sent).encode())
            returned[sent] = time.time()
        time.sleep(1.0)
        stop.set()
        for process in processes:
            process.join(60)
        marks = [mark for out in outs for mark in json.loads(Path(out).read_text())]
    client.close()
    rows = []
    for mark in marks:
        sent = mark["sent"]
        at = {"commit": returned.get(sent), **{stage: mark.get(stage) for stage in STAGES[1:]}}
        rows.append({stage: None if at[stage] is None else (at[stage] - sent) * 1e3 for stage in STAGES})
    return rows


def _run(src: Path, url: str, samples: int, workers: int, seed: int) -> list[dict]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), str(REPO)]))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "loadtest.idle_stages",
            "--one",
            url,
            "--samples",
            str(samples),
            "--workers",
            str(workers),
            "--seed",
            str(seed),
        ],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def summary(rows: list[dict]) -> dict[str, tuple[float, float, float]]:
    out = {}
    for stage in STAGES:
        values = sorted(r[stage] for r in rows if r[stage] is not None)
        if values:
            out[stage] = (statistics.median(values), values[int(len(values) * 0.9)], values[-1])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.idle_stages", description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", help="a git ref whose workers run in turn with this checkout's")
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7, help=argparse.SUPPRESS)
    parser.add_argument("--one", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one, args.samples, args.workers, args.seed)))
        return 0

    from loadtest.env import Bench
    from loadtest.versus import ref_tree, remove_tree

    bench = Bench.start()
    rows: dict[str, list[dict]] = {"ref": [], "this": []}
    with tempfile.TemporaryDirectory(prefix="shardq-idle-stages-") as tmp:
        ref_src = ref_tree(args.ref, Path(tmp) / "ref") if args.ref else None
        try:
            for round_ in range(args.rounds):
                for side in ("ref", "this", "this", "ref"):
                    if side == "ref" and ref_src is None:
                        continue
                    url = bench.shardq_database("idle")
                    rows[side] += _run(
                        ref_src if side == "ref" else REPO / "src",  # type: ignore[arg-type]
                        url,
                        args.samples,
                        args.workers,
                        args.seed + round_,
                    )
                    bench.drop(url)
        finally:
            bench.close()
            if ref_src is not None:
                remove_tree(ref_src)
    print(
        f"{'stage (ms after send)':24} " + "  ".join(f"{side + ' p50 / p90 / max':>26}" for side in rows if rows[side])
    )
    summaries = {side: summary(r) for side, r in rows.items() if r}
    for stage in STAGES:
        cells = [
            " / ".join(f"{v:.1f}" for v in summaries[side][stage]) for side in summaries if stage in summaries[side]
        ]
        print(f"{stage:24} " + "  ".join(f"{cell:>26}" for cell in cells))
    print(json.dumps({side: {"samples": len(r), "stages": summaries[side]} for side, r in rows.items() if r}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
