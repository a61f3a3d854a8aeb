"""The CockroachDB test databases' addresses, built the way the library builds any address."""

from __future__ import annotations

import dataclasses

from psycopg.conninfo import make_conninfo

from shardq.dsn import Dsn


def database_dsn(root: Dsn, name: str) -> Dsn:
    """The address of database ``name`` on the cluster ``root`` reaches: the same server, user and
    options, and the same engine (``root``'s URL scheme named it, or the server tells at connect).

    The test databases were once addressed as ``Dsn(conninfo, "cockroachdb")``, an engine's *name*
    where :class:`~shardq.dsn.Dsn` holds the engine itself, and the first connect failed with
    ``AttributeError: 'str' object has no attribute 'startup_options'`` (audit N10)."""
    return dataclasses.replace(root, conninfo=make_conninfo(root.conninfo, dbname=name))
