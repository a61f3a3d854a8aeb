"""``python -m loadtest.status_scale [--rows 10000000] [--samples 3000] [--out DIR]``

Status by id with many kept tasks (issue #31: under 5 ms at 10M kept tasks). Starts one
embedded PostgreSQL in a temporary SHARDQ_HOME, migrates a fresh database, and fills
``shardq_history`` with ``--rows`` finished tasks and ``shardq_attempts`` with one failed attempt
for every tenth of them, by ``INSERT … SELECT generate_series`` (not the queue path: the queue
path would take hours, and the queue's write cost is the history cell's subject). Indexes are
dropped for the fill and built again after it, as a bulk load does; then ``VACUUM ANALYZE``.

It then times :meth:`shardq.Client.status` (the library call: one statement of at most four
primary-key reads, over the client's own session) for ``--samples`` random ids of each kind, ``--rounds`` times: a kept task,
an id found nowhere, and a live task (enqueued through the API, some of them leased), and writes
p50/p99/max with the plan of its statement (``EXPLAIN (ANALYZE, BUFFERS)``) to
``OUT/status.json``. The database and the server are dropped at the end.

Ids are ``md5(n || salt)::uuid``: random over the key space, as v4 ids are, yet a sample can be
drawn in Python without reading the table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import sys
import time
import uuid
from pathlib import Path

import psycopg

import shardq
from loadtest.env import BUCKETS, Bench, loadavg, machine

SALT = "status-scale"
QUEUES = ("mail", "thumbs", "billing", "webhooks")
LIVE_TASKS = 2_000
FILL_CHUNK = 1_000_000  # rows per INSERT: each commits, so a slow machine shows progress

FILL_HISTORY = """
INSERT INTO shardq_history (id, queue, state, task, created_at, finished_at, attempts, run_seconds, result)
SELECT md5(g::TEXT || %(salt)s)::UUID,
       (%(queues)s::TEXT[])[1 + g %% 4],
       CASE WHEN g %% 50 = 0 THEN 'dead' WHEN g %% 97 = 0 THEN 'cancelled' ELSE 'succeeded' END,
       'app.tasks.job_' || (g %% 20),
       now() - INTERVAL '7 days' + g * INTERVAL '50 milliseconds',
       now() - INTERVAL '7 days' + g * INTERVAL '50 milliseconds' + INTERVAL '2 seconds',
       CASE WHEN g %% 10 = 0 THEN 2 ELSE 1 END,
       0.0125,
       CASE WHEN g %% 3 = 0 THEN '{"ok":true,"n":' || g || '}' END
FROM generate_series(%(start)s::INT8, %(stop)s::INT8) AS g
"""

FILL_ATTEMPTS = """
INSERT INTO shardq_attempts (task_id, attempt, queue, ended_at, run_seconds, error)
SELECT md5(g::TEXT || %(salt)s)::UUID, 1, (%(queues)s::TEXT[])[1 + g %% 4],
       now() - INTERVAL '7 days' + g * INTERVAL '50 milliseconds',
       0.5, 'ConnectionError: upstream reset the connection'
FROM generate_series(%(start)s::INT8, %(stop)s::INT8) AS g
WHERE g %% 10 = 0
"""

INDEXES = """
SELECT i.indexrelid::regclass::TEXT AS name, c.conname, pg_get_indexdef(i.indexrelid) AS indexdef,
       pg_get_constraintdef(c.oid) AS condef
FROM pg_index AS i LEFT JOIN pg_constraint AS c ON c.conindid = i.indexrelid AND c.contype = 'p'
WHERE i.indrelid = %(table)s::REGCLASS
"""


def task_id(n: int) -> uuid.UUID:
    """The id the fill gave row ``n`` (md5 of its number and the salt, as PostgreSQL's
    ``md5(text)::uuid`` reads the hex digest)."""
    return uuid.UUID(hashlib.md5(f"{n}{SALT}".encode()).hexdigest())


def _bulk_load(conn: psycopg.Connection, rows: int, log) -> dict:
    """Fill both tables with their indexes dropped, then build the indexes again."""
    conn.execute("SET maintenance_work_mem = '1GB'")
    conn.execute("SET synchronous_commit = off")
    saved: list[tuple[str, str]] = []
    for table in ("shardq_history", "shardq_attempts"):
        for name, conname, indexdef, condef in conn.execute(INDEXES, {"table": table}).fetchall():
            if conname is not None:
                conn.execute(f"ALTER TABLE {table} DROP CONSTRAINT {conname}")  # names from the catalog
                saved.append((f"ALTER TABLE {table} ADD CONSTRAINT {conname} {condef}", name))
            else:
                conn.execute(f"DROP INDEX {name}")
                saved.append((indexdef, name))
    t0 = time.perf_counter()
    for start in range(1, rows + 1, FILL_CHUNK):
        params = {"salt": SALT, "queues": list(QUEUES), "start": start, "stop": min(rows, start + FILL_CHUNK - 1)}
        conn.execute(FILL_HISTORY, params)
        conn.execute(FILL_ATTEMPTS, params)
        log(f"filled {params['stop']:,} of {rows:,} ({time.perf_counter() - t0:.0f} s)")
    filled = time.perf_counter() - t0
    for statement, name in saved:
        conn.execute(statement)
        log(f"built {name}")
    indexed = time.perf_counter() - t0 - filled
    conn.execute("VACUUM ANALYZE shardq_history")
    conn.execute("VACUUM ANALYZE shardq_attempts")
    sizes = {
        table: conn.execute(
            "SELECT pg_size_pretty(pg_table_size(%(t)s::REGCLASS)), pg_size_pretty(pg_indexes_size(%(t)s::REGCLASS)),"
            " (SELECT count(*) FROM " + table + ")",
            {"t": table},
        ).fetchone()
        for table in ("shardq_history", "shardq_attempts")
    }
    return {
        "fill_seconds": filled,
        "index_seconds": indexed,
        "tables": {t: {"table": s[0], "indexes": s[1], "rows": s[2]} for t, s in sizes.items()},
    }


def _time(client: shardq.Client, ids: list[uuid.UUID], expect: set[str]) -> dict:
    seconds: list[float] = []
    states: dict[str, int] = {}
    for task in ids:
        t0 = time.perf_counter()
        got = client.status(task)
        seconds.append(time.perf_counter() - t0)
        states[got.state] = states.get(got.state, 0) + 1
    unexpected = set(states) - expect
    if unexpected:
        raise AssertionError(f"status answered {sorted(unexpected)}, expected {sorted(expect)}")
    ms = sorted(s * 1000 for s in seconds)
    return {
        "samples": len(ms),
        "p50_ms": statistics.median(ms),
        "p99_ms": ms[int(len(ms) * 0.99) - 1],
        "max_ms": ms[-1],
        "mean_ms": statistics.fmean(ms),
        "states": states,
    }


def _plans(conn: psycopg.Connection, kept: uuid.UUID, live: uuid.UUID) -> dict[str, str]:
    """EXPLAIN (ANALYZE, BUFFERS) of the statement status sends, for a kept and a live id."""
    from shardq.sql import statements_for

    text = statements_for("postgresql")["task_status_read"].text
    out = {}
    for kind, task in (("kept", kept), ("live", live)):
        rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + text, {"id": task}).fetchall()
        out[kind] = "\n".join(r[0] for r in rows)
    return out


def run(rows: int, samples: int, rounds: int, log) -> dict:
    bench = Bench.start()
    try:
        url = bench.shardq_database("status")
        result: dict = {"rows": rows, "machine": machine(bench.url("postgres"))}
        with psycopg.connect(url, autocommit=True) as conn:
            result["load"] = _bulk_load(conn, rows, log)
            with shardq.connect(url) as client:
                for queue in QUEUES:
                    client.store.queue_ensure(queue)
                    client.store.queue_update(queue, keep_finished_seconds=30 * 86_400)
                done = client.enqueue_many(QUEUES[0], [b"{}"] * LIVE_TASKS)
                live = [uuid.UUID(t) for t in done.enqueued_ids]
                client.store.claim(list(range(BUCKETS)), QUEUES[0], LIVE_TASKS // 4, 3600.0)  # a quarter run
                rng = random.Random(31)
                kept = [task_id(rng.randint(1, rows)) for _ in range(samples)]
                unknown = [uuid.uuid4() for _ in range(samples)]
                live_sample = [rng.choice(live) for _ in range(samples)]
                _time(client, kept[: samples // 10], {"succeeded", "dead", "cancelled"})  # warm the session
                kinds = {
                    "kept": (kept, {"succeeded", "dead", "cancelled"}),
                    "unknown": (unknown, {"unknown"}),
                    "live": (live_sample, {"ready", "running"}),
                }
                # Rounds interleave the kinds: on a shared machine a burst of someone else's load
                # then lands on every kind alike, and the spread between rounds shows it.
                for round_ in range(rounds):
                    for kind, (ids, expect) in kinds.items():
                        r = _time(client, ids, expect)
                        r["loadavg"] = loadavg()
                        result.setdefault(kind, []).append(r)
                        log(
                            f"round {round_ + 1} {kind}: p50 {r['p50_ms']:.3f} ms, p99 {r['p99_ms']:.3f} ms, "
                            f"max {r['max_ms']:.2f} ms over {r['samples']:,} ids {r['states']} "
                            f"(load {r['loadavg']})"
                        )
            result["plans"] = _plans(conn, kept[0], live[0])
        bench.drop(url)
        return result
    finally:
        bench.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.status_scale", description=__doc__.split("\n\n")[1])
    parser.add_argument("--rows", type=int, default=10_000_000, help="kept tasks to fill (default 10,000,000)")
    parser.add_argument("--samples", type=int, default=3_000, help="ids timed per kind (default 3,000)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds of every kind (default 3)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "status")
    args = parser.parse_args(argv)
    t0 = time.time()

    def log(message: str) -> None:
        print(f"[{time.time() - t0:6.1f}s] {message}", flush=True)

    result = run(args.rows, args.samples, args.rounds, log)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "status.json").write_text(json.dumps(result, indent=1, default=str))
    log(f"written {args.out / 'status.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
