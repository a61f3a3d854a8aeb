"""Running a worker from the command line: the worker plus an optional live progress line."""

from __future__ import annotations

import threading
from typing import Sequence

from .client import Client
from .worker import Handler, WorkerStats


def run_worker(
    client: Client,
    queues: Sequence[str],
    handler: Handler,
    options: dict,
    *,
    progress: bool = False,
) -> WorkerStats:
    """Run a worker in this thread until it stops; with ``progress`` show a live count of
    processed tasks and the rate (rich), refreshed twice a second."""
    worker = client.worker(queues, handler, **options)
    if not progress:
        return worker.run()
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    done = threading.Event()
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), transient=True) as bar:
        line = bar.add_task("starting", total=None)

        def refresh() -> None:
            while not done.wait(0.5):
                s = worker.stats
                bar.update(line, description=f"processed {s.acked}  retried {s.retried}  dead {s.dead}")

        watcher = threading.Thread(target=refresh, daemon=True)
        watcher.start()
        try:
            return worker.run()
        finally:
            done.set()
