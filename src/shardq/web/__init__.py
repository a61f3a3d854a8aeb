"""``shardq web``: a browser dashboard to see and operate the queues.

Pages (``/``, ``/queues/{queue}``, ``/queues/{queue}/dead``, ``/tasks/{id}``) and the JSON API
behind them (:mod:`shardq.web.api`), served by Starlette and uvicorn; templates and static files
ship inside the package (no build step, no external URL: it works offline).

Guarantees:

* Every request needs the token (:mod:`shardq.web.auth`): ``Authorization: Bearer TOKEN`` or a
  session cookie from ``/login``; actions are POST only and, on the cookie path, need the
  session's CSRF token. Without a token the server generates one (loopback only) and refuses a
  non-loopback address.
* Numbers come from the same bounded reads as ``shardq stats`` (:mod:`shardq.web.views`).
* Payloads, errors and names are escaped everywhere (Jinja2 autoescape; no inline script, and a
  Content-Security-Policy that allows only the dashboard's own script and stylesheet); the
  database's connection string is never shown.
* An action the dashboard refuses (unknown queue or task, malformed body, missing CSRF token)
  changes nothing.
* Mounted under a prefix of another ASGI application (Starlette's ``Mount``, FastAPI's
  ``mount``, ``--root-path``), every URL it writes stays under the prefix (:mod:`shardq.web.mount`);
  in a Django project it sits behind Django's staff login (:mod:`shardq.contrib.django.dashboard`).

Needs the ``web`` extra (``pip install 'shardq[web]'``).
"""

from __future__ import annotations

from typing import Any

from shardq.errors import ShardqError

__all__ = ["serve"]


def serve(client: Any, **options: Any) -> None:
    """Serve the web dashboard for ``client`` until stopped; see :func:`shardq.web.server.serve`."""
    try:
        from shardq.web.server import serve as run
    except ImportError as exc:
        raise ShardqError(f"shardq web needs the web extra (pip install 'shardq[web]'): {exc}") from None
    run(client, **options)
