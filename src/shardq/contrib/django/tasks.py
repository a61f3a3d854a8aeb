"""The project's :class:`DjangoApp`: a :class:`shardq.App` configured from Django's settings whose
``defer`` joins the open ``transaction.atomic()`` block (see :mod:`shardq.contrib.django`)."""

from __future__ import annotations

from typing import Any

from shardq.app.application import App
from shardq.client import Client
from shardq.client_async import AsyncClient
from shardq.sessions.dsn import conninfo_from_parts

DEFAULTS = {"DSN": None, "DATABASE": "default", "BUCKETS": 16}


def settings_value(key: str) -> Any:
    """``settings.SHARDQ[key]``, or its default (:data:`DEFAULTS`)."""
    from django.conf import settings

    return {**DEFAULTS, **getattr(settings, "SHARDQ", {})}[key]


def dsn_from_settings() -> str:
    """``SHARDQ["DSN"]``, else a libpq string for the server and database of the
    ``SHARDQ["DATABASE"]`` entry of ``DATABASES`` (NAME, USER, PASSWORD, HOST, PORT)."""
    from django.conf import settings

    dsn = settings_value("DSN")
    if dsn:
        return str(dsn)
    entry = settings.DATABASES[settings_value("DATABASE")]
    params = {
        "dbname": entry.get("NAME"),
        "user": entry.get("USER"),
        "password": entry.get("PASSWORD"),
        "host": entry.get("HOST"),
        "port": str(entry.get("PORT") or "") or None,
    }
    return conninfo_from_parts(**params)


class _JoinsAtomicBlocks:
    """A :class:`~shardq.Client` whose producer writes on Django's connection while it is inside an
    atomic block (and the caller named no connection)."""

    def __init__(self, client: Client, alias: str) -> None:
        self._client = client
        self._alias = alias

    def producer(self, connection: object | None = None) -> Any:
        if connection is None:
            from django.db import connections

            django_connection = connections[self._alias]
            if django_connection.in_atomic_block:
                connection = django_connection.connection  # psycopg's, opened by atomic()
        return self._client.producer(connection)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


class DjangoApp(App):
    """:class:`shardq.App` with its DSN read from the settings on first use."""

    def __init__(self) -> None:
        super().__init__(None)
        self._configured = False

    def _configure(self) -> None:
        if not self._configured:
            self._dsn = dsn_from_settings()
            self._configured = True

    @property
    def client(self) -> Client:
        self._configure()
        return _JoinsAtomicBlocks(super().client, settings_value("DATABASE"))  # type: ignore[return-value]

    async def async_client(self) -> AsyncClient:
        self._configure()
        return await super().async_client()
