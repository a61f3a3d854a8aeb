"""procrastinate (psycopg 3 connector), driven as its documentation and peers.md §4.1 show.

* schema: ``app.schema_manager.apply_schema_async()``;
* enqueue: ``task.defer_async`` (single) and ``task.batch_defer_async`` (one statement per call);
* work: one ``App`` worker per process with a no-op async task (``wait=False`` drains and exits).

Settings: *defaults* is the worker as shipped (concurrency 1, poll 5 s, LISTEN/NOTIFY on, jobs
kept as ``succeeded`` rows, pool of 4 connections); *tuned* is the vendor's advice: poll 0.05 s,
concurrency 32, ``delete_jobs="always"``, a pool larger than the concurrency. procrastinate
fetches one job per statement, so the harness's batch size has no equivalent here.
"""

from __future__ import annotations

import asyncio
import time

from loadtest.procs import Control, Recorder, paced, watch_stop

QUEUE = "bench"


def _app(url: str, pool: dict | None = None):
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url, **(pool or {})))

    @app.task(queue=QUEUE, name="noop")
    async def noop(**kwargs) -> None:  # replaced per role below
        return None

    return app, noop


def setup(url: str) -> None:
    async def main() -> None:
        app, _ = _app(url)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()

    asyncio.run(main())


def enqueue_many(url: str, n: int, chunk: int = 1000) -> float:
    async def main() -> float:
        app, noop = _app(url)
        async with app.open_async():
            t0 = time.perf_counter()
            for start in range(0, n, chunk):
                k = min(chunk, n - start)
                await noop.batch_defer_async(*({"s": start + i} for i in range(k)))
            return time.perf_counter() - t0

    return asyncio.run(main())


def enqueue_single(url: str, n: int) -> float:
    async def main() -> float:
        app, noop = _app(url)
        async with app.open_async():
            await noop.defer_async(s=0)
            t0 = time.perf_counter()
            for i in range(n):
                await noop.defer_async(s=i)
            return time.perf_counter() - t0

    return asyncio.run(main())


def worker(spec: dict, ctl: Control) -> dict:
    latency = spec.get("latency", False)
    rec = Recorder(ctl, latency=latency)
    options = dict(spec.get("options", {}))
    pool = options.pop("pool", None)

    async def main() -> None:
        import procrastinate

        app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=spec["url"], **(pool or {})))

        if latency:

            @app.task(queue=QUEUE, name="noop")
            async def noop(t: float = 0.0, **_) -> None:
                rec.hit(t)
        else:

            @app.task(queue=QUEUE, name="noop")
            async def noop(**_) -> None:
                rec.hit()

        async with app.open_async():
            worker = app._worker(  # what run_worker_async builds; kept to call stop() on it
                queues=[QUEUE], wait=not spec.get("drain", True), install_signal_handlers=False, **options
            )
            loop = asyncio.get_running_loop()
            ctl.ready()
            watch_stop(ctl, lambda: loop.call_soon_threadsafe(worker.stop))
            await worker.run()

    asyncio.run(main())
    return rec.result()


def producer(spec: dict, ctl: Control) -> dict:
    async def main() -> dict:
        app, noop = _app(spec["url"])
        async with app.open_async():
            loop = asyncio.get_running_loop()

            def send(payloads: list[bytes]) -> None:
                import struct

                stamps = [{"t": struct.unpack_from("<d", p)[0]} for p in payloads]
                asyncio.run_coroutine_threadsafe(noop.batch_defer_async(*stamps), loop).result()

            return await loop.run_in_executor(None, paced, spec, ctl, send)

    return asyncio.run(main())
