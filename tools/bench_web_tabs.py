"""Server CPU of `shardq web` with browser tabs open on the overview: starts `shardq web` as its
own process (embedded PostgreSQL under a temporary SHARDQ_HOME, --tasks ready tasks over three
queues), opens --tabs headless Chromium tabs on the overview (each polls the API every 2 s), waits
--seconds, and prints the CPU seconds the web process and the database server used meanwhile.

    python tools/bench_web_tabs.py [--tabs 3] [--seconds 300] [--tasks 100000]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
from playwright.sync_api import sync_playwright

import shardq
from shardq.sessions.embedded import EmbeddedServer

TOKEN = "tabs-bench-token-0123456789"
CHROMIUM = os.environ.get("SHARDQ_TEST_CHROMIUM") or "/usr/bin/chromium"


def cpu_seconds(pids: list[int]) -> float:
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def postgres_pids(postmaster: int) -> list[int]:
    """The postmaster and its children (the backends serving the web process, background workers)."""
    found = [postmaster]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == postmaster:
                found.append(int(entry.name))
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tabs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--tasks", type=int, default=100_000)
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="shardq-web-tabs-")
    env = {**os.environ, "SHARDQ_HOME": home, "SHARDQ_WEB_TOKEN": TOKEN}
    env.pop("SHARDQ_DSN", None)
    os.environ.update({"SHARDQ_HOME": home})
    os.environ.pop("SHARDQ_DSN", None)
    client = shardq.connect()
    client.migrate()
    with psycopg.connect(client.dsn.conninfo, autocommit=True) as conn:
        for q in ("q0", "q1", "q2"):
            conn.execute("INSERT INTO shardq_queues (name) VALUES (%s) ON CONFLICT DO NOTHING", (q,))
        conn.execute(
            "INSERT INTO shardq_tasks (queue, rank, exec_time, id, state, payload) SELECT 'q' || (g %% 3), 0,"
            " now() - g * INTERVAL '1 microsecond', gen_random_uuid(), 'ready', '\\x00'::BYTEA"
            " FROM generate_series(1, %(n)s) AS g",
            {"n": args.tasks},
        )
    shardq_bin = str(Path(sys.executable).with_name("shardq"))
    web = subprocess.Popen([shardq_bin, "web", "--port", "0"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        url = ""
        while not url:
            line = web.stdout.readline()
            match = re.search(r"serving (http://\S+)", line)
            url = match.group(1) if match else ""
        server = EmbeddedServer(Path(home))
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            pages = []
            for _ in range(args.tabs):
                page = browser.new_context().new_page()
                page.goto(url + "login")
                page.fill("#token", TOKEN)
                page.click("button[type=submit]")
                pages.append(page)
            pg = postgres_pids(server.status().pid or 0)  # the web process's backends exist by now
            web_before, pg_before, started = cpu_seconds([web.pid]), cpu_seconds(pg), time.monotonic()
            time.sleep(args.seconds)
            elapsed = time.monotonic() - started
            web_cpu = cpu_seconds([web.pid]) - web_before
            pg_cpu = cpu_seconds([p for p in pg if Path(f"/proc/{p}").exists()]) - pg_before
            browser.close()
        print(
            f"{args.tabs} tabs on the overview for {elapsed:.0f} s ({args.tasks:,} tasks): web process "
            f"{web_cpu:.1f} CPU s ({100 * web_cpu / elapsed:.1f} % of one core), database "
            f"{pg_cpu:.1f} CPU s ({100 * pg_cpu / elapsed:.1f} %; backends that exited meanwhile not counted)"
        )
    finally:
        web.terminate()
        web.wait(10)
        client.close()
        EmbeddedServer(Path(home)).stop()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
