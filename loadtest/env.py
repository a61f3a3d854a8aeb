"""The benchmark's database and machine: one embedded PostgreSQL in a temporary SHARDQ_HOME,
a fresh database per contender per scenario, and the facts a report must carry (machine,
versions, background load)."""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import shutil
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from loadtest.shardq_paths import Dsn, EmbeddedServer, migrate

BUCKETS = 16  # shardq's default bucket count; the raw bound uses the same


@dataclass
class Bench:
    """One embedded server for a whole run. ``database()`` hands out fresh databases."""

    root: Path
    server: EmbeddedServer
    created: list[str] = field(default_factory=list)

    @classmethod
    def start(cls) -> Bench:
        root = Path(tempfile.mkdtemp(prefix="shardq-loadtest-"))
        server = EmbeddedServer(root)
        server.start()
        return cls(root, server)

    def url(self, database: str) -> str:
        return self.server.url(database)

    def admin(self) -> psycopg.Connection:
        return psycopg.connect(self.url("postgres"), autocommit=True)

    def database(self, label: str) -> str:
        """A new, empty database; returns its URL."""
        name = f"lt_{label}_{uuid.uuid4().hex[:6]}".lower().replace("-", "_")
        with self.admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')  # name built here from a fixed charset
        self.created.append(name)
        return self.url(name)

    def drop(self, url: str) -> None:
        name = url.rsplit("/", 1)[1]
        with self.admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if name in self.created:
            self.created.remove(name)

    def shardq_database(self, label: str, buckets: int = BUCKETS) -> str:
        url = self.database(label)
        migrate.upgrade(Dsn.parse(url), buckets=buckets)
        return url

    def server_cpu(self) -> float:
        """CPU seconds used so far by the server: live backends and auxiliary processes, plus
        the children the postmaster has already reaped (closed connections).

        Read until two readings agree: a backend reaped between reading the postmaster's total of
        reaped children and the scan of the live ones would be in neither, and a backend ends
        exactly when a measured cell ends (its client closes), which lost whole backends' CPU."""
        pid = self.server._pid()
        if pid is None:
            return 0.0
        return agreed_reading(lambda: _server_reading(pid))

    def close(self) -> None:
        for name in list(self.created):
            with contextlib.suppress(psycopg.Error):
                self.drop(self.url(name))
        try:
            self.server.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


_TICKS = os.sysconf("SC_CLK_TCK")


def agreed_reading(read: Callable[[], tuple[float, float, frozenset[int]]]) -> float:
    """The total of the first reading (total, reaped children's part, live children) after which
    a second one found the same reaped part and the same live children: no child ended or was
    reaped while it was taken."""
    last = read()
    while True:
        reading = read()
        if reading[1:] == last[1:]:
            return reading[0]
        last = reading


def _server_reading(pid: int) -> tuple[float, float, frozenset[int]]:
    """The CPU of the postmaster ``pid``, its reaped children and its live ones; the reaped
    children's part; which live ones were counted."""
    own, reaped = _proc_times(pid)
    total = own + reaped
    live = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None and int(fields[1]) == pid:  # ppid
                total += _cpu(fields[11], fields[12])
                live.add(int(entry.name))
    return total, reaped, frozenset(live)


def _proc_cpu(pid: int) -> float:
    """CPU seconds of process ``pid`` itself."""
    return _proc_times(pid)[0]


def _proc_times(pid: int) -> tuple[float, float]:
    """CPU seconds of process ``pid`` itself, and of its children it has reaped."""
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0, 0.0
    return _cpu(fields[11], fields[12]), _cpu(fields[13], fields[14])


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/PID/stat`` after the command (state ppid ... utime(11) stime(12) cutime(13)
    cstime(14), 0-based here); None once the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _cpu(user_ticks: str, system_ticks: str) -> float:
    return (int(user_ticks) + int(system_ticks)) / _TICKS


def track_commit_times(bench: Bench) -> None:
    """Restart the bench's server with ``track_commit_timestamp`` on, so that
    :func:`step_released_at` can read when the ack that released a workflow step committed."""
    with bench.admin() as conn:
        conn.execute("ALTER SYSTEM SET track_commit_timestamp = on")
    bench.server.stop()
    bench.server.start()


def step_released_at(url: str, step: str) -> float:
    """When the ack that released ``step`` (the database's one workflow) committed, as a Unix time.
    Read while the step runs: its row was last written by the count-off that released it (the
    step's own finish comes with its ack). Needs :func:`track_commit_times`."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT extract(epoch FROM pg_xact_commit_timestamp(xmin))::FLOAT8 "
            "FROM shardq_workflow_steps WHERE step = %s",
            (step,),
        ).fetchone()
    assert row is not None and row[0] is not None, f"no commit time for step {step!r}"
    return float(row[0])


def vacuum_analyze(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


def checkpoint(url: str) -> None:
    """Flush dirty pages so a checkpoint does not land inside the next timed phase."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")


def table_stats(url: str, table: str) -> dict:
    """Dead tuples and size of one table (what the checklist asks to record)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT n_live_tup, n_dead_tup, pg_total_relation_size(relid) FROM pg_stat_user_tables WHERE relname = %s",
            (table,),
        ).fetchone()
    if row is None:
        return {}
    return {"live": row[0], "dead": row[1], "bytes": row[2]}


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def loadavg() -> tuple[float, float, float] | None:
    try:
        return os.getloadavg()
    except OSError:
        return None


def machine(url: str) -> dict:
    with psycopg.connect(url, autocommit=True) as conn:
        pg_version = conn.execute("SHOW server_version").fetchone()[0]
        settings = dict(
            conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name = ANY(%s)",
                (["shared_buffers", "max_connections", "synchronous_commit", "fsync", "autovacuum_naptime"],),
            ).fetchall()
        )
    return {
        "nproc": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "cpu_model": _cpu_model(),
        "kernel": platform.release(),
        "loadavg_at_start": loadavg(),
        "versions": {
            "postgresql": pg_version,
            "python": platform.python_version(),
            "shardq": _version("shardq"),
            "psycopg": _version("psycopg"),
            "pgqueuer": _version("pgqueuer"),
            "asyncpg": _version("asyncpg"),
            "procrastinate": _version("procrastinate"),
        },
        "postgresql_settings": settings,
    }
