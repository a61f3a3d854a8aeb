"""``python -m loadtest.workflow_wakeup [--runs N] [--parents P]``: how soon an *idle* listening
worker starts a fan-in after its last parent's ack (issue #32).

One embedded PostgreSQL. Each run enqueues one workflow: P no-op parents in queue ``bench``
fanning in to one callback in queue ``bench.fanin``. A worker as deployed (listening for wake-ups,
default idle pause, 1 s at most) serves only ``bench.fanin`` and idles throughout; the parents are
worked off by ``app.work(["bench"], until_empty=True)`` in this thread, so the worker that acks
the last parent never claims the callback itself. The delay is from the commit of the ack that
released the callback (the server runs with ``track_commit_timestamp``: the callback reads its step
row's commit time) to the callback's handler starting. Without a
wake-up on release the idle worker takes the callback at its next poll (up to 1 s); with one, as
soon as the ack commits. Prints each run's delay and the median; nothing asserts.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time


def trial(url: str, parents: int) -> float:
    """One run on a fresh database; returns the delay in ms."""
    import shardq
    from loadtest.env import step_released_at

    app = shardq.App(url)
    started: list[float] = []
    released: list[float] = []
    called, warm = threading.Event(), threading.Event()

    @app.task(name="bench.noop", queue="bench")
    def noop(n: int) -> None: ...

    @app.task(name="bench.callback", queue="bench.fanin")
    def callback() -> None:
        started.append(time.time())
        released.append(step_released_at(url, "fan-in"))
        called.set()

    @app.task(name="bench.warm", queue="bench.fanin")
    def warm_up() -> None:
        warm.set()

    worker = app.client.worker(["bench.fanin"], app)
    running = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    running.start()
    try:
        warm_up.defer()
        assert warm.wait(30), "the fan-in worker never started"
        time.sleep(1.5)  # let the worker's idle pause grow to its maximum, as on a quiet queue
        wf = app.workflow("fan")
        members = wf.group(*[noop.step(n=i) for i in range(parents)])
        wf.add(callback.step(), after=members, name="fan-in")
        wf.enqueue()
        app.work(["bench"], until_empty=True)
        assert called.wait(60), "the fan-in never ran"
    finally:
        worker.stop()
        running.join(30)
    app.close()
    return (started[0] - released[0]) * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.workflow_wakeup", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--parents", type=int, default=100)
    args = parser.parse_args(argv)

    from loadtest.env import Bench, track_commit_times

    bench = Bench.start()
    track_commit_times(bench)
    delays = []
    try:
        for i in range(args.runs):
            url = bench.shardq_database(f"wf_wake_{i}")
            try:
                delays.append(trial(url, args.parents))
            finally:
                bench.drop(url)
            print(
                f"run {i + 1}: fan-in started {delays[-1]:.1f} ms after the last parent's ack",
                file=sys.stderr,
                flush=True,
            )
    finally:
        bench.close()
    print(
        json.dumps(
            {
                "parents": args.parents,
                "delays_ms": delays,
                "median_ms": statistics.median(delays),
                "max_ms": max(delays),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
