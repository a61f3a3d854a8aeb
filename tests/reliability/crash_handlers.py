"""Handlers the reliability suites run inside real ``shardq work`` processes.

Every execution leaves two lines in ``$SHARDQ_REL_OUT/rec.<pid>``: ``S`` when the handler starts
and ``F`` when it returns, each with the task id, attempt, pid, wall-clock time, the lease
expiry the worker was given and the payload (first 200 characters). Lines are written with one
``os.write`` on an ``O_APPEND`` file, so a SIGKILL can cut an execution short but never leave half
a line.

Environment:
    SHARDQ_REL_OUT       directory for the records (required)
    SHARDQ_REL_SLEEP_MS  each execution sleeps a random 0..this many ms (default 20): a slow handler
    SHARDQ_REL_HOLD      a directory of gate files ``hold`` waits for (graceful-stop tests)
"""

from __future__ import annotations

import os
import random
import time

import shardq

_fd: int | None = None


def _record(kind: str, task) -> None:
    global _fd
    if _fd is None:
        path = os.path.join(os.environ["SHARDQ_REL_OUT"], f"rec.{os.getpid()}")
        _fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    expires = task.lease_expires_at.timestamp() if task.lease_expires_at else 0.0
    payload = task.payload.decode("utf-8", "replace").replace("\t", " ").replace("\n", " ")[:200]
    line = f"{kind}\t{task.id}\t{task.attempt}\t{os.getpid()}\t{time.time():.6f}\t{expires:.6f}\t{payload}\n"
    os.write(_fd, line.encode())


def _pause() -> None:
    limit = float(os.environ.get("SHARDQ_REL_SLEEP_MS", "20"))
    if limit > 0:
        time.sleep(random.uniform(0, limit) / 1000.0)


def record(task) -> None:
    """Slow handler: record start, sleep a little, record finish. Payload ``poison`` fails for good."""
    from tests.reliability import chaos

    _record("S", task)
    chaos.on_handler()  # may SIGKILL this process mid-handler
    _pause()
    if task.payload == b"poison":
        _record("F", task)
        raise shardq.Permanent("poison payload")
    _record("F", task)


async def record_async(task) -> None:
    """:func:`record` as an ``async def`` handler (the worker's event-loop executor): the same
    records, the pause awaited."""
    import asyncio

    from tests.reliability import chaos

    _record("S", task)
    chaos.on_handler()
    limit = float(os.environ.get("SHARDQ_REL_SLEEP_MS", "20"))
    if limit > 0:
        await asyncio.sleep(random.uniform(0, limit) / 1000.0)
    _record("F", task)
    if task.payload == b"poison":
        raise shardq.Permanent("poison payload")


def hold(task) -> None:
    """Record start, block until the gate file ``$SHARDQ_REL_HOLD/<payload>`` or
    ``$SHARDQ_REL_HOLD/all`` exists (at most 120 s), record finish."""
    _record("S", task)
    gates = os.environ["SHARDQ_REL_HOLD"]
    mine = os.path.join(gates, task.payload.decode("ascii", "replace"))
    every = os.path.join(gates, "all")
    deadline = time.monotonic() + 120
    while not (os.path.exists(mine) or os.path.exists(every)) and time.monotonic() < deadline:
        time.sleep(0.01)
    _record("F", task)


def _periodic_app():
    """The app of the periodic reliability test: one schedule every second, recording each run
    (slot timestamp and task id) like the handlers above."""
    app = shardq.App()

    @app.periodic(every=1)
    @app.task(name="reliability.beat", queue="beats", pass_context=True)
    def beat(ctx, timestamp: int) -> None:
        global _fd
        if _fd is None:
            path = os.path.join(os.environ["SHARDQ_REL_OUT"], f"beats.{os.getpid()}")
            _fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(_fd, f"{timestamp}\t{ctx.id}\n".encode())

    return app


periodic_app = _periodic_app()
