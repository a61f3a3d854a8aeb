"""Recording the statement names a client's session sends, sync and asyncio alike."""

from __future__ import annotations

import uuid
from typing import Any


def _record_sync(session, sent):
    fetch_all, fetch_one, execute = session.fetch_all, session.fetch_one, session.execute

    def all_(name, params=None, **kw):
        sent.append((name, _shape(params)))
        return fetch_all(name, params, **kw)

    def one(name, params=None, **kw):
        sent.append((name, _shape(params)))
        return fetch_one(name, params, **kw)

    def ex(name, params=None, **kw):
        sent.append((name, _shape(params)))
        return execute(name, params, **kw)

    session.fetch_all, session.fetch_one, session.execute = all_, one, ex


def _record_async(session, sent):
    fetch_all, fetch_one, execute = session.fetch_all, session.fetch_one, session.execute

    async def all_(name, params=None, **kw):
        sent.append((name, _shape(params)))
        return await fetch_all(name, params, **kw)

    async def one(name, params=None, **kw):
        sent.append((name, _shape(params)))
        return await fetch_one(name, params, **kw)

    async def ex(name, params=None, **kw):
        sent.append((name, _shape(params)))
        return await execute(name, params, **kw)

    session.fetch_all, session.fetch_one, session.execute = all_, one, ex


def _shape(params: Any) -> Any:
    """Parameters with the random parts (task ids, lease tokens, stats slots) blanked."""
    if not params:
        return {}
    out = {}
    for key, value in params.items():
        if key in ("ids", "slot") or (isinstance(value, list) and value and isinstance(value[0], uuid.UUID)):
            out[key] = "…"
        else:
            out[key] = value
    return out
