"""shardq, driven through its public API: ``Client.enqueue_many`` / ``Producer`` to enqueue and
the real :class:`shardq.worker.Worker` (fetcher, handler threads, settler) to drain, with a no-op
handler. The chaos cell drives ``shardq work`` itself (see :mod:`loadtest.handlers`)."""

from __future__ import annotations

import random
import time

import psycopg

import shardq
from loadtest.procs import Control, Recorder, paced, stamp, unstamp, watch_stop
from loadtest.shardq_paths import Producer, TaskStore
from shardq.models import Task
from shardq.worker.contract import Handler

QUEUE = "bench"

# Direct inserts for the depth and reaper cells only: a million rows through the API would
# spend the cell's time budget on enqueueing, which the enqueue cell measures on its own.
FILL = """
INSERT INTO shardq_tasks (queue, rank, exec_time, id, state, priority, attempts, max_attempts, payload)
SELECT %(queue)s, 0, now() - INTERVAL '1 hour' + g * INTERVAL '1 microsecond', gen_random_uuid(), 'ready', 0, 0, 25,
       '\\x00'::BYTEA
FROM generate_series(1, %(n)s) AS g
"""


def enqueue_many(url: str, n: int, chunk: int = 1000, payload: bytes = b"x" * 16) -> float:
    with shardq.connect(url) as client:
        client.store.queue_ensure(QUEUE)
        t0 = time.perf_counter()
        client.enqueue_many(QUEUE, [payload] * n, batch_size=chunk)
        return time.perf_counter() - t0


#: The app the task-API cells run: one no-op task, dispatched by name from its JSON payload.
APP_TASK = "bench.noop"


def app_payloads(n: int) -> list[bytes]:
    """Payloads of ``n`` calls of :data:`APP_TASK` as ``defer`` writes them; the bare-handler
    cells enqueue the same bytes, so both paths move payloads of one size."""
    from shardq.arguments import encode_call

    return [encode_call(APP_TASK, {"n": i, "label": "bench"}) for i in range(n)]


def enqueue_payloads(url: str, payloads: list[bytes], chunk: int = 1000) -> float:
    """Seconds for ``Client.enqueue_many`` of these payloads in chunks of ``chunk``."""
    with shardq.connect(url) as client:
        client.store.queue_ensure(QUEUE)
        t0 = time.perf_counter()
        for start in range(0, len(payloads), chunk):
            client.enqueue_many(QUEUE, payloads[start : start + chunk], batch_size=chunk)
        return time.perf_counter() - t0


def defer_calls(url: str, n: int, chunk: int = 1000) -> float:
    """Seconds for ``AppTask.defer_many`` of ``n`` calls in chunks of ``chunk`` (argument check
    and JSON encoding included, as a user pays them)."""
    app = shardq.App(url)

    @app.task(name=APP_TASK, queue=QUEUE)
    def noop(n: int, label: str) -> None: ...

    try:
        app.client.store.queue_ensure(QUEUE)
        calls = [{"n": i, "label": "bench"} for i in range(n)]
        t0 = time.perf_counter()
        for start in range(0, n, chunk):
            noop.defer_many(calls[start : start + chunk])
        return time.perf_counter() - t0
    finally:
        app.close()


def interleaved_enqueue(url: str, n: int, chunk: int = 1000) -> dict[str, float]:
    """Seconds spent by ``Client.enqueue_many`` and by ``AppTask.defer_many`` enqueueing ``n``
    tasks each into one database, in alternating chunks of ``chunk`` (which goes first alternates
    too), so both meet the same table, the same checkpoints and the same noise. The payloads are
    the same bytes: ``enqueue_many`` gets them ready-made, ``defer_many`` builds them (argument
    check and JSON encoding included, as a user pays them)."""
    app = shardq.App(url)

    @app.task(name=APP_TASK, queue=QUEUE)
    def noop(n: int, label: str) -> None: ...

    try:
        client = app.client
        client.store.queue_ensure(QUEUE)
        calls = [{"n": i, "label": "bench"} for i in range(chunk)]
        payloads = app_payloads(chunk)
        spent = {"enqueue_many": 0.0, "defer_many": 0.0}
        for round_ in range(max(1, n // chunk)):
            order = ("enqueue_many", "defer_many") if round_ % 2 == 0 else ("defer_many", "enqueue_many")
            for mode in order:
                t0 = time.perf_counter()
                if mode == "enqueue_many":
                    client.enqueue_many(QUEUE, payloads, batch_size=chunk)
                else:
                    noop.defer_many(calls)
                spent[mode] += time.perf_counter() - t0
        return spent
    finally:
        app.close()


def set_limits(url: str, **limits: float) -> None:
    """Settings of the bench queue: flow-control limits (``concurrency=``, ``rate=``, ``burst=``),
    or any other ``Client.set_queue`` setting (``keep_finished_seconds=``)."""
    client = shardq.connect(url)
    try:
        client.set_queue(QUEUE, **limits)
    finally:
        client.close()


def enqueue_single(url: str, n: int, payload: bytes = b"x" * 16) -> float:
    with shardq.connect(url) as client:
        producer = Producer(client.store)
        producer.enqueue(QUEUE, payload)  # connect and create the queue outside the clock
        t0 = time.perf_counter()
        for _ in range(n):
            producer.enqueue(QUEUE, payload)
        return time.perf_counter() - t0


def fill(url: str, n: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO shardq_queues (name) VALUES (%s) ON CONFLICT DO NOTHING", (QUEUE,))
        fill_with(conn, n)


def fill_with(conn: psycopg.Connection, n: int) -> None:
    conn.execute(FILL, {"queue": QUEUE, "n": n})


def worker(spec: dict, ctl: Control) -> dict:
    """Role: one shardq Worker (``concurrency`` handler threads, ``batch`` per claim)."""
    latency = spec.get("latency", False)
    rec = Recorder(ctl, latency=latency)
    handler: Handler
    if latency:

        def stamped(task: Task) -> None:
            rec.hit(unstamp(task.payload)[0], task.created_at.timestamp())

        handler = stamped
    elif spec.get("asynchronous"):  # an async def handler: the worker's event-loop executor

        async def counted(task: Task) -> None:
            rec.hit()

        handler = counted
    elif spec.get("app"):  # the task API: JSON decode, signature, dispatch by name
        app = shardq.App(spec["url"])

        @app.task(name=APP_TASK, queue=QUEUE)
        def noop(n: int, label: str) -> None:
            rec.hit()

        handler = app.dispatch
    elif spec.get("sleep"):  # a handler that takes this long (flow-control cell)
        pause = spec["sleep"]

        def sleeping(task: Task) -> None:
            rec.hit()
            time.sleep(pause)

        handler = sleeping
    else:

        def plain(task: Task) -> None:
            rec.hit()

        handler = plain

    options = {
        "concurrency": spec.get("concurrency", 4),
        "batch": spec["batch"],
        "until_empty": spec.get("drain", True),
        "grace_seconds": 5.0,
    }
    options.update(spec.get("options", {}))
    client = shardq.connect(spec["url"])
    worker = client.worker([QUEUE], handler, **options)
    # Connect, discover the layout and read the settings before the clock starts.
    store = TaskStore(client.new_session())
    store.layout()
    store.queue_list()
    store.session.close()
    ctl.ready()
    watch_stop(ctl, worker.stop)
    stats = worker.run(install_signal_handlers=False)
    client.close()
    return rec.result(
        statements=stats.claim_statements,
        claimed=stats.claimed,
        acked=stats.acked,
        empty_rounds=stats.empty_rounds,
        lease_lost=stats.lease_lost,
    )


def producer(spec: dict, ctl: Control) -> dict:
    client = shardq.connect(spec["url"], notify=spec.get("notify", True))
    producer = Producer(client.store, notifier=client.notifier)
    producer.enqueue_many(QUEUE, [])  # validate and connect before the clock
    client.store.layout()
    return paced(spec, ctl, lambda payloads: producer.enqueue_many(QUEUE, payloads))


def idle_producer(spec: dict, ctl: Control) -> dict:
    """Role: ``samples`` single enqueues, each after a pause drawn from ``gap`` (seconds) so the
    workers are idle (backed off, or parked on LISTEN) when it arrives."""
    client = shardq.connect(spec["url"], notify=spec.get("notify", True))
    producer = Producer(client.store, notifier=client.notifier)
    producer.enqueue_many(QUEUE, [])
    client.store.layout()
    rng = random.Random(spec.get("seed", 7))
    ctl.ready()
    for seq in range(spec["samples"]):
        time.sleep(rng.uniform(*spec["gap"]))
        if ctl.stopping():
            break
        producer.enqueue(QUEUE, stamp(seq))
        ctl.counters[ctl.index] = seq + 1
    return {"sent": spec["samples"]}
