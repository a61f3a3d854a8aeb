"""pgqueuer (asyncpg driver), driven as its documentation and its own benchmark do.

* schema: ``Queries(AsyncpgDriver(conn)).install()``;
* enqueue: ``Queries.enqueue(entrypoint, payload)`` (single) and the list form (one UNNEST
  insert per call);
* work: one ``PgQueuer.from_asyncpg_connection`` per process with a no-op async entrypoint,
  ``run(batch_size=…, mode=drain)`` for burn-down, continuous mode for steady state.

Settings: *defaults* is ``run()`` as shipped (batch_size 10); *tuned* uses the harness's batch
size for every contender (100) — the knob pgqueuer's own benchmark turns. Every claim also
writes a ``pgqueuer_log`` row and every finish deletes the job and logs it (peers.md §4.2).
"""

from __future__ import annotations

import asyncio
import time

from loadtest.procs import Control, Recorder, paced, stamp, unstamp, watch_stop

ENTRYPOINT = "noop"


def _queries(conn):
    from pgqueuer import AsyncpgDriver, Queries

    return Queries(AsyncpgDriver(conn))


async def _connect(url: str):
    import asyncpg

    return await asyncpg.connect(url)


def setup(url: str) -> None:
    async def main() -> None:
        conn = await _connect(url)
        try:
            await _queries(conn).install()
        finally:
            await conn.close()

    asyncio.run(main())


def enqueue_many(url: str, n: int, chunk: int = 1000, payload: bytes = b"x" * 16) -> float:
    async def main() -> float:
        conn = await _connect(url)
        q = _queries(conn)
        t0 = time.perf_counter()
        for start in range(0, n, chunk):
            k = min(chunk, n - start)
            await q.enqueue([ENTRYPOINT] * k, [payload] * k, [0] * k)
        elapsed = time.perf_counter() - t0
        await conn.close()
        return elapsed

    return asyncio.run(main())


def enqueue_single(url: str, n: int, payload: bytes = b"x" * 16) -> float:
    async def main() -> float:
        conn = await _connect(url)
        q = _queries(conn)
        await q.enqueue(ENTRYPOINT, payload)
        t0 = time.perf_counter()
        for _ in range(n):
            await q.enqueue(ENTRYPOINT, payload)
        elapsed = time.perf_counter() - t0
        await conn.close()
        return elapsed

    return asyncio.run(main())


def worker(spec: dict, ctl: Control) -> dict:
    from pgqueuer import PgQueuer
    from pgqueuer.types import QueueExecutionMode

    latency = spec.get("latency", False)
    rec = Recorder(ctl, latency=latency)

    async def main() -> None:
        conn = await _connect(spec["url"])
        pgq = PgQueuer.from_asyncpg_connection(conn)

        if latency:

            @pgq.entrypoint(ENTRYPOINT)
            async def noop(job) -> None:
                rec.hit(unstamp(job.payload)[0], job.created.timestamp())
        else:

            @pgq.entrypoint(ENTRYPOINT)
            async def noop(job) -> None:
                rec.hit()

        loop = asyncio.get_running_loop()
        ctl.ready()
        watch_stop(ctl, lambda: loop.call_soon_threadsafe(pgq.shutdown.set))
        mode = QueueExecutionMode.drain if spec.get("drain", True) else QueueExecutionMode.continuous
        await pgq.run(mode=mode, **spec.get("options", {}))
        if not conn.is_closed():
            await conn.close()

    asyncio.run(main())
    return rec.result()


def idle_producer(spec: dict, ctl: Control) -> dict:
    """Role: ``samples`` single enqueues (``Queries.enqueue``, which notifies pgqueuer's
    listening workers), each after a pause drawn from ``gap`` seconds, as shardq's idle producer."""
    import random

    async def main() -> dict:
        conn = await _connect(spec["url"])
        q = _queries(conn)
        rng = random.Random(spec.get("seed", 7))
        ctl.ready()
        for seq in range(spec["samples"]):
            await asyncio.sleep(rng.uniform(*spec["gap"]))
            if ctl.stopping():
                break
            await q.enqueue(ENTRYPOINT, stamp(seq))
            ctl.counters[ctl.index] = seq + 1
        await conn.close()
        return {"sent": spec["samples"]}

    return asyncio.run(main())


def producer(spec: dict, ctl: Control) -> dict:
    async def main() -> dict:
        conn = await _connect(spec["url"])
        q = _queries(conn)
        loop = asyncio.get_running_loop()

        # The pacing loop is synchronous; run each send on this loop from a worker thread.
        def send(payloads: list[bytes]) -> None:
            k = len(payloads)
            asyncio.run_coroutine_threadsafe(q.enqueue([ENTRYPOINT] * k, payloads, [0] * k), loop).result()

        return await loop.run_in_executor(None, paced, spec, ctl, send)

    return asyncio.run(main())
