"""Where the dashboard is mounted: the prefix in front of every URL it writes.

The dashboard may run at a server's root (``shardq web``) or under a prefix in another ASGI
application, e.g. ``Mount("/queue-admin", app=create_app(...))`` in Starlette or FastAPI, or a
server started with ``--root-path``. ASGI says where in the scope's ``root_path``; Starlette's
``Mount`` keeps the full path in ``path`` and adds its prefix to ``root_path``.

Guarantees
    * :func:`root` is the prefix without a trailing slash, ``""`` at the top: pages write links as
      ``root + "/queues/..."`` (templates: ``{{ root }}/queues/...``).
    * :func:`route_path` is the path inside the dashboard (``/login``, ``/api/queues``), whether
      the server left the prefix in ``path`` (Starlette's ``Mount``) or took it out.
    * :func:`redirect` is the one way a page answers with a redirect: a 303 to a path inside the
      dashboard, with the prefix in front.

Does not
    * read the prefix from request headers (``X-Forwarded-Prefix``): only the server or the
      enclosing application sets ``root_path``, so a client cannot point links elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse


def root(scope: Mapping[str, Any]) -> str:
    """The mount prefix of the request ``scope`` describes, without a trailing slash (``""`` at the top)."""
    return str(scope.get("root_path") or "").rstrip("/")


def route_path(scope: Mapping[str, Any]) -> str:
    """The request's path inside the dashboard (the prefix removed when the path still has it)."""
    path = str(scope["path"])
    prefix = root(scope)
    if prefix and (path == prefix or path.startswith(prefix + "/")):
        return path[len(prefix) :] or "/"
    return path


def redirect(request: Request, path: str) -> RedirectResponse:
    """A 303 to ``path``, a path inside the dashboard (``/queues/x?done=...``), under the mount prefix."""
    return RedirectResponse(root(request.scope) + path, status_code=303)
