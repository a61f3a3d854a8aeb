"""The app of the workflow crash test: one task that records each execution like
:func:`crash_handlers.record` (``S`` at start, ``F`` at return, in ``$SHARDQ_REL_OUT/rec.<pid>``),
with the step's label as the payload column."""

from __future__ import annotations

import os
import random
import time

import shardq
from tests.reliability import chaos

app = shardq.App()
_fd: int | None = None


def _record(kind: str, ctx: shardq.TaskContext, label: str) -> None:
    global _fd
    if _fd is None:
        path = os.path.join(os.environ["SHARDQ_REL_OUT"], f"rec.{os.getpid()}")
        _fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    expires = ctx._handle.lease_expires_at.timestamp()
    line = f"{kind}\t{ctx.id}\t{ctx.attempt}\t{os.getpid()}\t{time.time():.6f}\t{expires:.6f}\t{label}\n"
    os.write(_fd, line.encode())


@app.task(name="reliability.step", queue="wfcrash", pass_context=True)
def step(ctx: shardq.TaskContext, label: str) -> None:
    _record("S", ctx, label)
    chaos.on_handler()  # may SIGKILL this process mid-handler
    time.sleep(random.uniform(0, 0.02))
    _record("F", ctx, label)
