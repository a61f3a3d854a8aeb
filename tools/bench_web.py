"""Time the dashboard's pages and API with a large tasks table: median and p99 of each path, and
EXPLAIN (ANALYZE, BUFFERS) of a task-list page's scan. Uses a scratch embedded server under a
temporary SHARDQ_HOME.

    python tools/bench_web.py [--tasks 1000000] [--repeat 100]

The table: ``--tasks`` ready tasks spread over three queues (q0, q1, q2), plus a tenth as many
scheduled an hour ahead, one in a hundred of those with a last error; a registered worker.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import tempfile
import time
import urllib.parse

import psycopg
from starlette.testclient import TestClient

import shardq
from shardq.admin import browse
from shardq.models import RANK_SCHEDULED
from shardq.sessions.embedded import EmbeddedServer
from shardq.sql import statements_for
from shardq.web.app import create_app

FILL = """
INSERT INTO shardq_tasks (queue, rank, exec_time, id, state, priority, attempts, max_attempts, payload)
SELECT 'q' || (g %% 3), 0, now() - INTERVAL '1 hour' + g * INTERVAL '1 microsecond', gen_random_uuid(), 'ready', 0, 0,
       25, '\\x00'::BYTEA
FROM generate_series(1, %(n)s) AS g
"""
FILL_SCHEDULED = """
INSERT INTO shardq_tasks (queue, rank, exec_time, id, state, priority, attempts, max_attempts, payload, last_error)
SELECT 'q' || (g %% 3), %(rank)s, now() + INTERVAL '1 hour' + g * INTERVAL '1 microsecond', gen_random_uuid(),
       'scheduled', 0, 1, 25, convert_to('{"task": "billing.charge", "args": {"n": ' || g || '}}', 'UTF8'),
       CASE WHEN g %% 100 = 0 THEN 'Traceback (most recent call last):' || chr(10) || 'KeyError: ' || g END
FROM generate_series(1, %(n)s) AS g
"""


def _percentile(times: list[float], p: float) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def explain(url: str, buckets: int) -> None:
    """EXPLAIN the first page of the scheduled list with an error filter, with the parameters the
    task list sends (shardq.admin.browse.span_params)."""
    text = statements_for("postgresql")["task_browse_span"].text
    filters = browse.Filters(error_text="keyerror")
    params = {
        "queue": "q0",
        **filters.params(dt.datetime.now(dt.UTC)),
        **browse.span_params(buckets, "scheduled", filters, None, descending=False, limit=50),
    }
    with psycopg.connect(url, autocommit=True) as conn:
        plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + text, params).fetchall()
    print(f"EXPLAIN task_browse_span (scheduled, error filter, scan {params['scan']} per bucket):")
    for (line,) in plan:
        print("   ", line)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=100)
    parser.add_argument("--explain-only", metavar="URL", help="only EXPLAIN, against this database")
    args = parser.parse_args()
    if args.explain_only:
        explain(args.explain_only, 16)
        return
    os.environ["SHARDQ_HOME"] = tempfile.mkdtemp(prefix="shardq-web-bench-")
    os.environ.pop("SHARDQ_DSN", None)
    client = shardq.connect()
    client.migrate()
    url = client.dsn.conninfo
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        for q in ("q0", "q1", "q2"):
            conn.execute("INSERT INTO shardq_queues (name) VALUES (%s) ON CONFLICT DO NOTHING", (q,))
        conn.execute(FILL, {"n": args.tasks})
        conn.execute(FILL_SCHEDULED, {"n": args.tasks // 10, "rank": RANK_SCHEDULED})
        conn.execute("VACUUM ANALYZE shardq_tasks")
        task_id = conn.execute("SELECT id FROM shardq_tasks WHERE state = 'scheduled' LIMIT 1").fetchone()[0]
    print(f"{args.tasks + args.tasks // 10:,} tasks loaded in {time.perf_counter() - started:.0f} s")
    explain(url, client.store.layout().visit_count)
    app = create_app(client, "bench-token-0123456789")
    headers = {"Authorization": "Bearer bench-token-0123456789"}
    with TestClient(app) as http:
        first = http.get("/api/queues/q0/tasks/ready?limit=50", headers=headers).json()
        deep = first["next"]
        for _ in range(200):  # 200 pages in: keyset paging costs the same however deep
            deep = http.get("/api/queues/q0/tasks/ready", params={"limit": 50, "after": deep}, headers=headers).json()[
                "next"
            ]
        paths = [
            "/",
            "/api/queues",
            "/queues/q0",
            "/api/queues/q0",
            "/queues/q0/dead",
            f"/tasks/{task_id}",
            "/api/queues/q0/tasks/ready?limit=50",
            f"/api/queues/q0/tasks/ready?limit=50&after={urllib.parse.quote(deep, safe='')}",
            "/queues/q0/tasks?state=ready",
            "/queues/q0/tasks?state=scheduled&error=keyerror",
            "/api/queues/q0/tasks/scheduled?order=desc&limit=50",
            "/api/queues/q0/tasks/running",
            "/workers",
            "/audit",
        ]
        print(f"{'path':58s} {'median':>9s} {'p99':>9s}   ({args.repeat} requests each)")
        for path in paths:
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                response = http.get(path, headers=headers)
                times.append((time.perf_counter() - t0) * 1e3)
                assert response.status_code == 200, (path, response.status_code, response.text[:200])
            shown = path if len(path) < 58 else path[:55] + "…"
            print(f"{shown:58s} {statistics.median(times):7.1f} ms {_percentile(times, 99):7.1f} ms")
    client.close()
    EmbeddedServer().stop()  # the scratch server (SHARDQ_HOME above) and its data go
    shutil.rmtree(os.environ["SHARDQ_HOME"], ignore_errors=True)


if __name__ == "__main__":
    main()
