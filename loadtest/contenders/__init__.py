"""The systems under test, each configured the way its vendor documents (defaults) and the way
its vendor tunes it for speed (tuned). Every contender runs the same number of worker processes
and, where the system has the notion, the same claim batch size."""

from __future__ import annotations

from dataclasses import dataclass, field

import psycopg

from loadtest.contenders import pgq, proc, raw, shardq_bench


@dataclass(frozen=True)
class Contender:
    name: str
    module: str  # loadtest.contenders.<x>
    options: dict = field(default_factory=dict)
    note: str = ""
    pending_sql: str = ""  # counts tasks not yet finished after a drain

    @property
    def worker(self) -> str:
        return f"{self.module}:worker"

    @property
    def producer(self) -> str:
        return f"{self.module}:producer"

    def impl(self):
        return {"raw": raw, "shardq_bench": shardq_bench, "pgq": pgq, "proc": proc}[self.module.rsplit(".", 1)[1]]

    def setup(self, bench, label: str) -> str:
        """A fresh database with this contender's schema; returns its URL."""
        kind = self.module.rsplit(".", 1)[1]
        if kind == "shardq_bench":
            return bench.shardq_database(label)
        url = bench.database(label)
        self.impl().setup(url)
        return url

    def pending(self, url: str) -> int:
        with psycopg.connect(url, autocommit=True) as conn:
            return conn.execute(self.pending_sql).fetchone()[0]


def _c(name, kind, options=None, note="", pending=""):
    return Contender(name, f"loadtest.contenders.{kind}", options or {}, note, pending)


BATCH = 100

CONTENDERS = {
    c.name: c
    for c in (
        _c(
            "raw-bound",
            "raw",
            note="claim batch + delete batch, plain psycopg, prepared",
            pending="SELECT count(*) FROM raw_tasks",
        ),
        _c(
            "shardq",
            "shardq_bench",
            note="Worker defaults: 4 handler threads, batch 100, polling",
            pending="SELECT count(*) FROM shardq_tasks",
        ),
        _c(
            "shardq-async",
            "shardq_bench",
            note="Worker defaults with an async def handler: 4 coroutines on one event loop",
            pending="SELECT count(*) FROM shardq_tasks",
        ),
        _c(
            "pgqueuer-defaults",
            "pgq",
            {},
            note="run() as shipped: batch_size 10",
            pending="SELECT count(*) FROM pgqueuer",
        ),
        _c(
            "pgqueuer-tuned",
            "pgq",
            {"batch_size": BATCH},
            note=f"batch_size {BATCH}",
            pending="SELECT count(*) FROM pgqueuer",
        ),
        _c(
            "procrastinate-defaults",
            "proc",
            {},
            note="concurrency 1, poll 5 s, listen_notify, delete_jobs never, pool 4",
            pending="SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')",
        ),
        _c(
            "procrastinate-tuned",
            "proc",
            {
                "concurrency": 32,
                "fetch_job_polling_interval": 0.05,
                "delete_jobs": "always",
                "pool": {"min_size": 4, "max_size": 40},
            },
            note="concurrency 32, poll 0.05 s, delete_jobs always, pool 40",
            pending="SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')",
        ),
    )
}
