"""``python -m loadtest.workflow_statements [--steps N] [--chains M]``: where the server's time
goes while workflow steps and plain tasks are worked (issue #32's CPU per step).

The runs of ``loadtest.workflows`` (``plain``, ``fan``, ``chains``: the same enqueue and
``app.work(until_empty=True)``, one process each on a fresh database) on an embedded PostgreSQL
started with ``pg_stat_statements``; for the work phase only, each statement's calls, rows and
execution time, and its execution time per task of the run. Execution time leaves out what every
statement pays around it (parsing a Bind, the commit's WAL flush), so the column sums are below
the server's CPU that ``loadtest.workflows`` measures; read them against each other.
"""

from __future__ import annotations

import argparse
import json
import re
import sys

from loadtest.env import Bench, track_commit_times
from loadtest.workflows import _run

KINDS = ("plain", "fan", "chains")


class _WorkPhase:
    """Called by ``loadtest.workflows._run`` as its server CPU reading, at the start and at the end
    of the work phase: clears the statement statistics, then reads them."""

    def __init__(self, bench: Bench, url: str) -> None:
        self.bench, self.database, self.calls, self.statements = bench, url.rsplit("/", 1)[1], 0, []

    def __call__(self) -> float:
        with self.bench.admin() as conn:
            if self.calls == 0:
                conn.execute("SELECT pg_stat_statements_reset()")
            else:
                self.statements = conn.execute(
                    "SELECT s.query, s.calls, s.rows, s.total_exec_time FROM pg_stat_statements AS s"
                    " JOIN pg_database AS d ON d.oid = s.dbid WHERE d.datname = %s ORDER BY s.total_exec_time DESC",
                    (self.database,),
                ).fetchall()
        self.calls += 1
        return self.bench.server_cpu()


def _label(query: str) -> str:
    """A statement's first words, enough to tell shardq's statements apart."""
    text = re.sub(r"\s+", " ", query).strip()
    for marker in ("UPDATE shardq_", "DELETE FROM shardq_", "INSERT INTO shardq_"):
        at = text.find(marker)
        if at >= 0:
            return text[at : at + 48]
    return text[:48]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.workflow_statements", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--chains", type=int, default=10_000)
    args = parser.parse_args(argv)
    bench = Bench.start()
    report: dict[str, list[dict]] = {}
    try:
        with bench.admin() as conn:
            conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
        track_commit_times(bench)  # restarts the server: both settings take effect (the fan-in reads one)
        with bench.admin() as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        for kind in KINDS:
            url = bench.shardq_database(f"st_{kind}")
            phase = _WorkPhase(bench, url)
            try:
                _run(url, kind, args.steps, args.chains, phase)
            finally:
                bench.drop(url)
            report[kind] = [
                {
                    "statement": _label(q),
                    "calls": calls,
                    "rows": rows,
                    "exec_ms": ms,
                    "us_per_task": ms * 1e3 / args.steps,
                }
                for q, calls, rows, ms in phase.statements
            ]
    finally:
        bench.close()
    print(json.dumps(report))
    for kind, rows in report.items():
        print(f"== {kind}: {sum(r['us_per_task'] for r in rows):.1f} µs of execution per task")
        for r in rows[:8]:
            print(f"{r['us_per_task']:8.1f} µs {r['calls']:7} calls {r['rows']:8} rows  {r['statement']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
