"""Serving the dashboard with uvicorn: :func:`serve` (blocks until stopped, what ``shardq web``
runs) and :class:`BackgroundServer` (a thread, for tests and embedding)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Self

import uvicorn

from shardq.admin.stats import StatsOptions
from shardq.client import Client
from shardq.errors import ShardqError
from shardq.web.app import create_app
from shardq.web.auth import resolve_read_token, resolve_token

START_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class Started:
    """What :func:`serve` tells its caller once listening: the URL to open (loopback for a
    wildcard bind), the token, whether the token was generated (then it must be shown to the
    operator, once) and, for a wildcard bind, a note on reaching it from elsewhere."""

    url: str
    token: str
    generated: bool
    note: str | None = None


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise ShardqError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _url(sock: socket.socket, host: str) -> str:
    """The address to open: for a wildcard bind (``0.0.0.0``, ``::``), which no browser can
    open, the loopback address of the same family."""
    port = sock.getsockname()[1]
    bare = host.strip("[]")
    if bare in ("0.0.0.0", ""):
        bare = "127.0.0.1"
    elif bare == "::":
        bare = "::1"
    shown = f"[{bare}]" if ":" in bare else bare
    return f"http://{shown}:{port}/"


def _note(sock: socket.socket, host: str) -> str | None:
    """For a wildcard bind, how other machines reach it."""
    if host.strip("[]") not in ("0.0.0.0", "::", ""):
        return None
    port = sock.getsockname()[1]
    return (
        f"listening on every interface ({host}); from another machine use this one's name or address, "
        f"e.g. http://{socket.gethostname()}:{port}/"
    )


def _server(
    client: Client,
    token: str,
    *,
    stats_options: StatsOptions | None,
    refresh_seconds: float,
    started: threading.Event | None = None,
    read_token: str | None = None,
    schedules: list[Any] | None = None,
) -> uvicorn.Server:
    app = create_app(
        client,
        token,
        stats_options=stats_options,
        refresh_seconds=refresh_seconds,
        started=started,
        read_token=read_token,
        schedules=schedules,
    )
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", server_header=False)
    return uvicorn.Server(config)


def serve(
    client: Client,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    token: str | None = None,
    read_token: str | None = None,
    schedules: list[Any] | None = None,
    stats_options: StatsOptions | None = None,
    refresh_seconds: float = 2.0,
    on_start: Callable[[Started], None] | None = None,
) -> None:
    """Serve the web dashboard until SIGINT/SIGTERM. Without ``token`` one is generated (loopback
    only: a non-loopback ``host`` without a token raises :class:`~shardq.errors.InvalidInput`
    before anything listens). ``on_start`` is called once the socket listens, with the URL and
    the token. ``port`` 0 picks a free port. ``read_token``: a second token that sees everything
    and changes nothing (checked before anything listens). ``schedules``: an app's periodic
    schedules, listed on the Periodic page."""
    token, generated = resolve_token(token, host)
    read_token = resolve_read_token(read_token, token)
    sock = _bind(host, port)
    try:
        if on_start is not None:
            on_start(Started(_url(sock, host), token, generated, _note(sock, host)))
        _server(
            client,
            token,
            stats_options=stats_options,
            refresh_seconds=refresh_seconds,
            read_token=read_token,
            schedules=schedules,
        ).run(sockets=[sock])
    finally:
        sock.close()


class BackgroundServer:
    """The dashboard served from a thread on a free loopback port (a context manager).
    Entering returns once the application has started (no polling); leaving stops it and waits
    for the thread."""

    def __init__(
        self,
        client: Client,
        token: str,
        *,
        host: str = "127.0.0.1",
        stats_options: StatsOptions | None = None,
        refresh_seconds: float = 2.0,
        read_token: str | None = None,
        schedules: list[Any] | None = None,
    ) -> None:
        self.token, _ = resolve_token(token, host)
        self._started = threading.Event()
        self._server = _server(
            client,
            self.token,
            stats_options=stats_options,
            refresh_seconds=refresh_seconds,
            started=self._started,
            read_token=read_token,
            schedules=schedules,
        )
        # uvicorn installs signal handlers only on the main thread: this one leaves them alone.
        self._sock = _bind(host, 0)
        self.url = _url(self._sock, host)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, name="shardq-web", daemon=True
        )

    def __enter__(self) -> Self:
        self._thread.start()
        if not self._started.wait(START_TIMEOUT_SECONDS):
            self.__exit__()
            raise ShardqError("the web dashboard did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(START_TIMEOUT_SECONDS)
        self._sock.close()
