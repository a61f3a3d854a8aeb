"""shardq in an ASGI application (FastAPI, Starlette): a lifespan that opens and closes the app's
:class:`~shardq.AsyncClient`.

::

    tasks = shardq.App()
    api = FastAPI(lifespan=shardq.contrib.asgi.lifespan(tasks))          # or lifespan(tasks, inner=yours)

    @api.post("/orders")
    async def order(session: AsyncSession = Depends(db_session)):
        session.add(Order(...))
        await send_receipt.configure(connection=session).defer_async(order_id=...)
        await session.commit()     # the order and its task commit together; a rollback keeps neither

Guarantees
    * Start-up connects the client of the server's event loop (so the first request does not pay
      the connection, and a wrong DSN stops the start); shutdown closes it, after the
      application's own lifespan (``inner``) has ended, whatever that raised.
    * ``defer_async`` with ``connection=`` a SQLAlchemy ``AsyncSession`` (``postgresql+psycopg``)
      writes the task in that session's transaction (:mod:`shardq.app`): nothing new here.

Does not
    * mount the dashboard: ``shardq.web.app.create_app`` is a Starlette app of its own, and its
      pages link from the server's root (serve it on its own port, ``shardq web``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from ..app import App

Lifespan = Callable[[Any], AbstractAsyncContextManager[Any]]


def lifespan(tasks: App, inner: Lifespan | None = None) -> Lifespan:
    """A lifespan for ``FastAPI(lifespan=…)`` / ``Starlette(lifespan=…)`` around ``inner`` (the
    application's own, optional; its state is passed through)."""

    @contextlib.asynccontextmanager
    async def run(asgi_app: Any) -> AsyncIterator[Any]:
        client = await tasks.async_client()
        try:
            await client.connect()
            if inner is None:
                yield None
            else:
                async with inner(asgi_app) as state:
                    yield state
        finally:
            await tasks.aclose()

    return run
