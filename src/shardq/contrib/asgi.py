"""shardq in an ASGI application (FastAPI, Starlette): a lifespan that opens and closes the app's
:class:`~shardq.AsyncClient`, and the dashboard to mount under a prefix.

::

    tasks = shardq.App()
    api = FastAPI(lifespan=shardq.contrib.asgi.lifespan(tasks))          # or lifespan(tasks, inner=yours)

    @api.post("/orders")
    async def order(session: AsyncSession = Depends(db_session)):
        session.add(Order(...))
        await send_receipt.configure(connection=session).defer_async(order_id=...)
        await session.commit()     # the order and its task commit together; a rollback keeps neither

    api.mount("/queue-admin", shardq.contrib.asgi.dashboard(tasks, token=os.environ["SHARDQ_WEB_TOKEN"]))

Guarantees
    * Start-up connects the client of the server's event loop (so the first request does not pay
      the connection, and a wrong DSN stops the start); shutdown closes it, after the
      application's own lifespan (``inner``) has ended, whatever that raised.
    * ``defer_async`` with ``connection=`` a SQLAlchemy ``AsyncSession`` (``postgresql+psycopg``)
      writes the task in that session's transaction (:mod:`shardq.app.application`): nothing new here.

    * :func:`dashboard` under any prefix (``Mount("/queue-admin", app=...)``): its links, forms,
      redirects, static files, API calls and session cookie stay under the prefix
      (:mod:`shardq.web.mount`); it asks for its own token exactly as ``shardq web`` does.

Does not
    * run the dashboard's lifespan (Starlette does not start a mounted app's): it needs none.
    * put the dashboard behind the application's own login: it keeps its token (for Django's
      staff login see :mod:`shardq.contrib.django.dashboard`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from shardq.admin.stats import StatsOptions
from shardq.app.application import App

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


def dashboard(
    tasks: App,
    token: str,
    *,
    read_token: str | None = None,
    stats_options: StatsOptions | None = None,
    refresh_seconds: float = 2.0,
) -> Any:
    """The web dashboard of ``tasks``' database (its periodic schedules on the Periodic page), to
    mount under a prefix. ``token`` (at least 16 characters) and ``read_token`` (optional, sees
    everything and changes nothing) as for ``shardq web``; ``stats_options`` and
    ``refresh_seconds`` as for :func:`shardq.web.app.create_app`. Connects ``tasks``' client."""
    from shardq.web.app import create_app  # the web extra: only an application that mounts it needs Starlette
    from shardq.web.auth import resolve_token

    checked, _ = resolve_token(token, "127.0.0.1")
    return create_app(
        tasks.client,
        checked,
        read_token=read_token,
        stats_options=stats_options,
        refresh_seconds=refresh_seconds,
        schedules=list(tasks.schedules.values()),
    )
