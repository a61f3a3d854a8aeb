"""Running a worker from the command line: the worker, an optional live progress line, and an
optional Prometheus endpoint."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from shardq.client import Client
from shardq.worker.config import WorkerTotals
from shardq.worker.contract import Handler, Resolver
from shardq.worker.runtime import Worker

log = logging.getLogger("shardq.cli.run_worker")


class EarlySignals:
    """SIGTERM/SIGINT handling from the first moment of `shardq work`: a signal that arrives while
    the worker is still starting (imports, connecting) is held and handed to the worker once it
    exists, so the process stops gracefully (exit 0) instead of being killed by the default action."""

    def __init__(self) -> None:
        self.worker: Worker | None = None
        self.pending: list[int] = []

    @classmethod
    def install(cls) -> EarlySignals:
        import signal

        handler = cls()
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, handler)
        return handler

    def __call__(self, signum: int, frame: object) -> None:
        if self.worker is None:
            self.pending.append(signum)
        else:
            self.worker.handle_signal(signum, frame)

    def attach(self, worker: Worker) -> None:
        self.worker = worker
        for signum in self.pending:
            worker.handle_signal(signum, None)


def run_worker(
    client: Client,
    queues: Sequence[str],
    handler: Handler | Resolver,
    options: dict,
    *,
    progress: bool = False,
    metrics_port: int | None = None,
    metrics_host: str = "0.0.0.0",
    on_metrics: Callable[[str], None] | None = None,
    signals: EarlySignals | None = None,
) -> WorkerTotals:
    """Run a worker in this thread until it stops; with ``progress`` show a live count of
    processed tasks (rich), refreshed twice a second.

    With ``metrics_port`` (0: any free port) the worker's Prometheus metrics
    (:mod:`shardq.worker.metrics`) are served on ``metrics_host:metrics_port`` for as long as it runs;
    ``on_metrics`` is called with the endpoint's URL once it listens."""
    on_event = events = None
    server = None
    if metrics_port is not None:
        from shardq.worker.metrics import WorkerMetrics

        metrics = WorkerMetrics(queues=queues)
        server = metrics.serve(metrics_port, metrics_host)
        on_event, events = metrics.on_event, metrics.EVENTS
        log.info("serving metrics on %s", server.url)
        if on_metrics is not None:
            on_metrics(server.url)
    try:
        worker = client.worker(queues, handler, on_event=on_event, events=events, **options)
        if signals is not None:
            signals.attach(worker)
        install = signals is None
        if not progress:
            return worker.run(install_signal_handlers=install)
        return _run_with_progress(worker, install)
    finally:
        if server is not None:
            server.close()


def _run_with_progress(worker: Worker, install_signal_handlers: bool = True) -> WorkerTotals:
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    done = threading.Event()
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), transient=True) as bar:
        line = bar.add_task("starting", total=None)

        def refresh() -> None:
            while not done.wait(0.5):
                s = worker.totals
                bar.update(line, description=f"processed {s.acked}  retried {s.retried}  dead {s.dead}")

        watcher = threading.Thread(target=refresh, daemon=True)
        watcher.start()
        try:
            return worker.run(install_signal_handlers=install_signal_handlers)
        finally:
            done.set()
