"""The raw-SQL bound: the simplest correct claim-batch + delete-batch loop in plain psycopg.

The table has shardq's PostgreSQL shape (bucket column leading the key, state a plain column) so
the comparison measures the code path, not the schema; fillfactor 80, with which its narrower rows
already take 99.7 % of claims as HOT updates (shardq's need 60, see its migration 0004). One loop per process,
no threads: claim up to ``batch`` ready rows of one bucket with ``FOR UPDATE SKIP LOCKED``
(marking them leased with an expiry, so a crash loses nothing: that is what makes it correct),
run the no-op handler on each, delete the batch by key; walk the buckets round-robin from a
random offset. Both statements are prepared. No lease token, no attempts, no lease records, no
settings, no bookkeeping: anything a real queue does on top of this costs throughput, which is
why this is the practical limit of the machine.
"""

from __future__ import annotations

import random
import time

import psycopg

from loadtest.env import BUCKETS
from loadtest.procs import Control, Recorder, paced, unstamp

QUEUE = "bench"

SCHEMA = f"""
CREATE TABLE raw_tasks (
    bucket INT4 NOT NULL DEFAULT floor(random() * {BUCKETS})::INT4,
    queue TEXT NOT NULL,
    exec_time TIMESTAMPTZ NOT NULL DEFAULT now(),
    id UUID NOT NULL DEFAULT gen_random_uuid(),
    state TEXT NOT NULL DEFAULT 'ready',
    lease_expires_at TIMESTAMPTZ NULL,
    payload BYTEA NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (bucket, queue, exec_time, id)
) WITH (fillfactor = 80)
"""

CLAIM = """
WITH picked AS MATERIALIZED (
    SELECT bucket, queue, exec_time, id FROM raw_tasks
    WHERE bucket = %(bucket)s AND queue = %(queue)s AND exec_time <= now() AND state = 'ready'
    ORDER BY exec_time LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE raw_tasks AS t SET state = 'leased', lease_expires_at = now() + INTERVAL '30 seconds'
FROM picked AS p
WHERE t.bucket = p.bucket AND t.queue = p.queue AND t.exec_time = p.exec_time AND t.id = p.id
RETURNING t.exec_time, t.id, t.payload
"""

DELETE = """
DELETE FROM raw_tasks AS t
USING unnest(%(exec_times)s::TIMESTAMPTZ[], %(ids)s::UUID[]) AS k(exec_time, id)
WHERE t.bucket = %(bucket)s AND t.queue = %(queue)s AND t.exec_time = k.exec_time AND t.id = k.id
"""

INSERT_MANY = """
INSERT INTO raw_tasks (queue, payload) SELECT %(queue)s, p FROM unnest(%(payloads)s::BYTEA[]) AS p
"""

INSERT_ONE = "INSERT INTO raw_tasks (queue, payload) VALUES (%(queue)s, %(payload)s)"

FILL = """
INSERT INTO raw_tasks (queue, exec_time, payload)
SELECT %(queue)s, now() - INTERVAL '1 hour' + g * INTERVAL '1 microsecond', '\\x00'::BYTEA
FROM generate_series(1, %(n)s) AS g
"""


def setup(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SCHEMA)


def enqueue_many(url: str, n: int, chunk: int = 1000, payload: bytes = b"x" * 16) -> float:
    """Insert ``n`` tasks, ``chunk`` per statement; returns seconds taken."""
    with psycopg.connect(url, autocommit=True) as conn:
        t0 = time.perf_counter()
        for start in range(0, n, chunk):
            k = min(chunk, n - start)
            conn.execute(INSERT_MANY, {"queue": QUEUE, "payloads": [payload] * k}, prepare=True)
        return time.perf_counter() - t0


def enqueue_single(url: str, n: int, payload: bytes = b"x" * 16) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        t0 = time.perf_counter()
        for _ in range(n):
            conn.execute(INSERT_ONE, {"queue": QUEUE, "payload": payload}, prepare=True)
        return time.perf_counter() - t0


def fill(url: str, n: int) -> None:
    """``n`` ready tasks in one server-side statement (depth cells)."""
    with psycopg.connect(url, autocommit=True) as conn:
        fill_with(conn, n)


def fill_with(conn: psycopg.Connection, n: int) -> None:
    conn.execute(FILL, {"queue": QUEUE, "n": n})


def worker(spec: dict, ctl: Control) -> dict:
    """Role: claim, run, delete until a whole round is empty (``drain``) or until stopped."""
    batch = spec["batch"]
    drain = spec.get("drain", True)
    latency = spec.get("latency", False)
    rec = Recorder(ctl, latency=latency)
    conn = psycopg.connect(spec["url"], autocommit=True)
    position = random.randrange(BUCKETS)
    statements = 0
    ctl.ready()
    empty = 0
    while not ctl.stopping():
        bucket = position % BUCKETS
        position += 1
        statements += 1
        rows = conn.execute(CLAIM, {"bucket": bucket, "queue": QUEUE, "limit": batch}, prepare=True).fetchall()
        if not rows:
            empty += 1
            if empty >= BUCKETS:
                if drain:
                    break
                time.sleep(0.01)
                empty = 0
            continue
        empty = 0
        for _exec_time, _task_id, payload in rows:
            if latency:
                rec.hit(unstamp(payload)[0])
            else:
                rec.hit()
        conn.execute(
            DELETE,
            {"bucket": bucket, "queue": QUEUE, "exec_times": [r[0] for r in rows], "ids": [r[1] for r in rows]},
            prepare=True,
        )
        statements += 1
    conn.close()
    return rec.result(statements=statements)


def producer(spec: dict, ctl: Control) -> dict:
    """Role: enqueue at ``rate`` tasks/s in ticks of ``tick`` seconds, stamped for latency."""
    conn = psycopg.connect(spec["url"], autocommit=True)
    return paced(
        spec, ctl, lambda payloads: conn.execute(INSERT_MANY, {"queue": QUEUE, "payloads": payloads}, prepare=True)
    )
