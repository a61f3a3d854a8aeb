"""Time the dashboard's pages and API with a large tasks table (issue: pages render in <= 200 ms
with 1M tasks). Uses a scratch embedded server under a temporary SHARDQ_HOME.

    python tools/bench_web.py [--tasks 1000000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import psycopg
from starlette.testclient import TestClient

import shardq
from shardq.web.app import create_app

FILL = """
INSERT INTO shardq_tasks (queue, rank, exec_time, id, state, priority, attempts, max_attempts, payload)
SELECT 'q' || (g %% 3), 0, now() - INTERVAL '1 hour' + g * INTERVAL '1 microsecond', gen_random_uuid(), 'ready', 0, 0,
       25, '\\x00'::BYTEA
FROM generate_series(1, %(n)s) AS g
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    os.environ["SHARDQ_HOME"] = tempfile.mkdtemp(prefix="shardq-web-bench-")
    os.environ.pop("SHARDQ_DSN", None)
    client = shardq.connect()
    client.migrate()
    url = client.dsn.conninfo
    with psycopg.connect(url, autocommit=True) as conn:
        for q in ("q0", "q1", "q2"):
            conn.execute("INSERT INTO shardq_queues (name) VALUES (%s) ON CONFLICT DO NOTHING", (q,))
        conn.execute(FILL, {"n": args.tasks})
        conn.execute("VACUUM ANALYZE shardq_tasks")
        task_id = conn.execute("SELECT id FROM shardq_tasks LIMIT 1").fetchone()[0]
    app = create_app(client, "t")
    headers = {"Authorization": "Bearer t"}
    with TestClient(app) as http:
        for path in ("/", "/api/queues", "/queues/q0", "/api/queues/q0", "/queues/q0/dead", f"/tasks/{task_id}"):
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                response = http.get(path, headers=headers)
                times.append((time.perf_counter() - t0) * 1e3)
                assert response.status_code == 200, (path, response.status_code, response.text[:200])
            print(f"{path:28s} median {statistics.median(times):7.1f} ms  max {max(times):7.1f} ms")
    client.close()


if __name__ == "__main__":
    main()
