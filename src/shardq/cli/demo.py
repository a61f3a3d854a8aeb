"""The demo pipeline (the README's main job): Spark enqueues, ``shardq work`` processes drain, a
worker is killed and its tasks come back through the reaper, and the numbers are checked.

    shardq demo [--tasks N] [--workers 4]

Steps, on the embedded PostgreSQL unless a DSN is configured:

1. ``migrate``; a fresh queue ``demo-<8 hex>`` with a short lease (:data:`LEASE_SECONDS`), so a
   killed worker's tasks come back within seconds;
2. ``workers`` × ``shardq work QUEUE --handler shardq.cli.demo:record_start`` and one
   ``shardq reap`` start as subprocesses of the real command line;
3. Spark (``local[2]``) generates ``tasks`` rows and :func:`shardq.spark.enqueue_dataframe`
   enqueues them through JDBC; the workers start draining as soon as the first chunks merge;
4. once 40 % of the tasks are done, one worker is SIGKILLed; the leases it held expire and the
   reaper hands its tasks to the other workers;
5. when the queue is empty, the workers are stopped (SIGTERM) and the report is built from the
   start records the handler wrote: tasks/s for enqueue and drain, p50/p99 enqueue→start latency
   (the task's ``created_at``, set when its chunk was merged, to the first time a handler started
   it), tasks that ran again on a later attempt (the killed worker's, returned by the reaper), dead
   letters. The run *passes* when every task was started
   at least once, the queue is empty and nothing was dead-lettered.

Start records: the handler appends one fixed line per start to ``$SHARDQ_DEMO_RESULTS/starts-<pid>``
with a single ``write`` on an ``O_APPEND`` descriptor, before it returns (i.e. before the ack), so
a SIGKILL cannot lose the record of a task that was acked."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from shardq import validation
from shardq.client import Client
from shardq.errors import ShardqError
from shardq.migrations import apply as migrate_module
from shardq.models.tasks import Task
from shardq.sessions.dsn import Dsn, resolve_dsn

TASKS_DEFAULT = 200_000  # about a minute end to end on a 2-core machine (Spark start included)


WORKERS_DEFAULT = 4


LEASE_SECONDS = 3.0


REAP_INTERVAL_SECONDS = 1.0


KILL_AT_FRACTION = 0.4


RESULTS_ENV = "SHARDQ_DEMO_RESULTS"


PAYLOAD_PREFIX = b"demo-"


_record_fd: int | None = None


def record_start(task: Task) -> None:
    """The demo's handler: note which task started, when it was created and when it started."""
    global _record_fd
    if _record_fd is None:
        directory = os.environ.get(RESULTS_ENV)
        if not directory:
            raise ShardqError(f"{RESULTS_ENV} is not set: this handler only runs inside `shardq demo`")
        _record_fd = os.open(
            os.path.join(directory, f"starts-{os.getpid()}"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
        )
    index = int(task.payload[len(PAYLOAD_PREFIX) :])
    line = f"{index} {task.attempt} {task.created_at.timestamp():.6f} {time.time():.6f}\n"
    os.write(_record_fd, line.encode())


@dataclass
class DemoReport:
    tasks: int
    workers: int
    queue: str
    enqueue_seconds: float = 0.0
    drain_seconds: float = 0.0
    latency_p50: float | None = None
    latency_p99: float | None = None
    dead: int = 0
    left_in_queue: int = 0
    never_started: int = 0
    started_twice: int = 0
    #: tasks that ran on a second or later attempt: here, the killed worker's, returned by the reaper
    came_back: int = 0
    killed_worker: int | None = None
    #: how Spark wrote the tasks (SparkEnqueueResult.writer): "copy" or "jdbc"
    writer: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def enqueue_rate(self) -> float:
        return self.tasks / self.enqueue_seconds if self.enqueue_seconds else 0.0

    @property
    def drain_rate(self) -> float:
        return self.tasks / self.drain_seconds if self.drain_seconds else 0.0

    @property
    def passed(self) -> bool:
        return not self.problems


Progress = Callable[[str, int, int], None]


def _percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "shardq.cli.main", *args]


def run_demo(
    *,
    tasks: int = TASKS_DEFAULT,
    workers: int = WORKERS_DEFAULT,
    dsn: str | Dsn | None = None,
    kill_one: bool = True,
    progress: Progress | None = None,
    timeout_seconds: float | None = None,
) -> DemoReport:
    """Run the pipeline of the module docstring and return its report (``report.passed``).

    ``progress(phase, done, total)`` gets ``"spark"``/``"write"``/``"merge"`` from the enqueue and
    ``"drain"`` (tasks done) while the workers work; ``"kill"`` (pid, 0) when a worker is killed."""
    validation.positive_int(tasks, "tasks", maximum=50_000_000)
    validation.positive_int(workers, "workers", maximum=64)
    if kill_one and workers < 2:
        raise validation.InvalidInput("killing a worker needs at least 2 workers")
    report_progress = progress or (lambda phase, done, total: None)
    dsn = resolve_dsn(dsn)
    migrate_module.upgrade(dsn)
    queue = f"demo-{uuid.uuid4().hex[:8]}"
    report = DemoReport(tasks=tasks, workers=workers, queue=queue)
    results = Path(tempfile.mkdtemp(prefix="shardq-demo-"))
    try:
        with open(results / "processes.log", "ab") as logs:
            _pipeline(report, dsn, results, logs, kill_one, report_progress, timeout_seconds)
    finally:
        if report.passed:
            shutil.rmtree(results, ignore_errors=True)
        else:
            report.problems.append(f"records and process logs kept in {results}")
    return report


def _pipeline(
    report: DemoReport,
    dsn: Dsn,
    results: Path,
    logs: IO[bytes],
    kill_one: bool,
    report_progress: Progress,
    timeout_seconds: float | None,
) -> None:
    from shardq.spark.jdbc import spark_session
    from shardq.spark.job import enqueue_dataframe
    from shardq.spark.options import WriteOptions

    tasks, queue = report.tasks, report.queue
    env = dict(os.environ, SHARDQ_DSN=dsn.conninfo, **{RESULTS_ENV: str(results)})
    processes: list[subprocess.Popen] = []  # the workers
    services: list[subprocess.Popen] = []  # the reaper
    deadline = time.monotonic() + (timeout_seconds or max(150.0, tasks / 1000))
    try:
        worker_args = (
            "work",
            queue,
            "--handler",
            "shardq.cli.demo:record_start",
            "--concurrency",
            "4",
            "--batch",
            "100",
            "--lease",
            str(LEASE_SECONDS),
            "--grace",
            "5",
        )
        for _ in range(report.workers):
            processes.append(subprocess.Popen(_cli(*worker_args), env=env, stdout=logs, stderr=logs))
        services.append(
            subprocess.Popen(_cli("reap", "--interval", str(REAP_INTERVAL_SECONDS)), env=env, stdout=logs, stderr=logs)
        )

        report_progress("spark", 0, 1)
        with _stderr_to(logs):  # the JVM's own notices (it keeps this stderr): processes.log
            spark = spark_session(master="local[2]", app_name="shardq-demo")
        report_progress("spark", 1, 1)
        from pyspark.sql import functions as F

        df = spark.range(tasks).select(
            F.concat(F.lit(PAYLOAD_PREFIX.decode()), F.col("id").cast("string")).alias("payload")
        )
        started = time.perf_counter()
        result = enqueue_dataframe(
            df, queue, run_id=f"{queue}-run", dsn=dsn, progress=report_progress, options=WriteOptions(partitions=2)
        )
        report.enqueue_seconds = time.perf_counter() - started
        report.writer = result.writer
        if result.enqueued != tasks:
            report.problems.append(f"enqueued {result.enqueued} of {tasks}")

        with Client(dsn, application_name="shardq-demo", notify=False) as client:
            while True:
                # bounded per-bucket counts: a lower bound while deep, exact once small (see shardq.admin.stats)
                stats = client.stats(follower_read=True).queues.get(queue)
                left = (stats.ready + stats.scheduled + stats.leased + stats.expired + stats.backlog) if stats else 0
                dead = stats.dead if stats else 0
                report_progress("drain", tasks - left, tasks)
                if kill_one and report.killed_worker is None and tasks - left >= KILL_AT_FRACTION * tasks:
                    victim = processes[0]
                    victim.send_signal(signal.SIGKILL)
                    victim.wait()
                    report.killed_worker = victim.pid
                    report_progress("kill", victim.pid, 0)
                if left == 0:
                    break
                if time.monotonic() > deadline:
                    report.problems.append(f"timed out with {left} tasks left")
                    break
                if all(p.poll() is not None for p in processes):
                    report.problems.append("every worker exited early (see processes.log)")
                    break
                time.sleep(0.25)
            drained_at = time.time()
            report.left_in_queue = left
            report.dead = dead
        _stop(processes + services)
        _read_results(results, report, drained_at)
        if report.dead:
            report.problems.append(f"{report.dead} task(s) dead-lettered")
        if report.left_in_queue:
            report.problems.append(f"{report.left_in_queue} task(s) left in the queue")
        if report.never_started:
            report.problems.append(f"{report.never_started} task(s) never started")
    finally:
        _stop(processes + services)


@contextlib.contextmanager
def _stderr_to(file: IO[bytes]) -> Iterator[None]:
    """File descriptor 2 pointed at ``file`` meanwhile: a child started now (Spark's JVM) writes
    its stderr there for good; this process's own stderr comes back afterwards."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        os.dup2(file.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _read_results(results: Path, report: DemoReport, drained_at: float) -> None:
    first_start: dict[int, tuple[float, float]] = {}
    starts = 0
    retried: set[int] = set()
    for file in results.glob("starts-*"):
        for line in file.read_text().splitlines():
            parts = line.split()
            if len(parts) != 4:
                continue  # a torn line cannot happen with O_APPEND writes; skip rather than fail
            index, attempt, created, began = int(parts[0]), int(parts[1]), float(parts[2]), float(parts[3])
            starts += 1
            if attempt > 1:
                retried.add(index)
            if index not in first_start or began < first_start[index][1]:
                first_start[index] = (created, began)
    report.came_back = len(retried)
    report.never_started = sum(1 for i in range(report.tasks) if i not in first_start)
    report.started_twice = starts - len(first_start)
    if first_start:
        latencies = [began - created for created, began in first_start.values()]
        report.latency_p50 = _percentile(latencies, 0.50)
        report.latency_p99 = _percentile(latencies, 0.99)
        report.drain_seconds = max(drained_at - min(b for _, b in first_start.values()), 1e-9)
