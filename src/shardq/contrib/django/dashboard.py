"""shardq's web dashboard in a Django project's URLs, behind Django's own staff login.

::

    # urls.py (needs django.contrib.auth, sessions and their middleware, and shardq[web])
    urlpatterns = [..., path("queue-admin/", include("shardq.contrib.django.urls"))]

Guarantees
    * Only an active staff user (``is_staff``) gets in, without the dashboard's token; anyone
      else, signed in or not, is redirected to ``settings.LOGIN_URL`` with ``?next=`` (Django's
      ``redirect_to_login``), for pages and the JSON API alike.
    * Read-only or full: a staff user sees every page and changes nothing (the dashboard's
      read-only mode: every POST is refused with 403) unless they hold the permission
      ``shardq.operate_dashboard`` (:mod:`shardq.contrib.django.models`; superusers hold every
      permission). Why a permission of its own rather than ``is_superuser`` or a group: it is
      granted like any other, per user or per group, in Django's admin, and pausing a queue or
      purging dead letters is an operator's right, not a site administrator's.
    * Links, forms, redirects, the script and its API calls stay under the include's prefix
      (``SCRIPT_NAME`` included: :mod:`shardq.web.mount`).
    * The dashboard's forms carry its own CSRF token, derived from the Django session (a salted
      HMAC of the session key under ``SECRET_KEY``), and every POST must repeat it; the view is
      exempt from Django's ``CsrfViewMiddleware`` because those forms cannot carry Django's token.
    * The audit log names the Django user (``full access, Django user alice, from 10.0.0.5``).
    * The dashboard reads through :data:`shardq.contrib.django.app`'s client (its DSN from
      ``SHARDQ`` or ``DATABASES``), made on the first request.
    * The same under WSGI and ASGI (``get_asgi_application()`` under uvicorn or daphne): the view
      is sync, so under ASGI Django runs it in a worker thread (login, permission and session are
      ORM calls there); the dashboard's own application then runs on the server's loop and its
      queries in its thread pool, never on the loop (docs/web.md, "Django served through ASGI").

Does not
    * accept the dashboard's tokens: ``Authorization`` and ``Cookie`` headers are not passed on,
      and ``…/login`` sends a staff user to the overview. For scripts, use ``shardq web`` or the
      ASGI mount (:func:`shardq.contrib.asgi.dashboard`).
    * stream: each answer is collected, then returned (pages and API answers are bounded).
"""

from __future__ import annotations

import secrets
import threading
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils.crypto import salted_hmac
from django.views.decorators.csrf import csrf_exempt

#: The permission that turns a staff user's read-only view into full control.
PERMISSION = "shardq.operate_dashboard"
#: Headers that could prove a dashboard token or session: Django's login replaces them.
_DROPPED = frozenset({"authorization", "cookie"})

_lock = threading.Lock()
_apps: list[Any] = []


def _dashboard() -> Any:
    """The project's dashboard application, made once per process on first use."""
    from shardq.contrib.django import app
    from shardq.web.app import create_app  # the web extra: only a project that includes these URLs needs it

    with _lock:
        if not _apps:
            # No one can present this token (the headers that would carry it are dropped): Django's
            # login is the only way in.
            _apps.append(
                create_app(
                    app.client, secrets.token_urlsafe(32), upstream_login=True, schedules=list(app.schedules.values())
                )
            )
        return _apps[0]


def _identity(request: HttpRequest) -> Any:
    from shardq.web.auth import Identity

    user = request.user
    session_key = getattr(getattr(request, "session", None), "session_key", None) or ""
    csrf = salted_hmac("shardq.contrib.django.dashboard", f"{session_key}:{user.pk}").hexdigest()
    return Identity(
        "upstream", csrf=csrf, read_only=not user.has_perm(PERMISSION), user=f"Django user {user.get_username()}"
    )


def _scope(request: HttpRequest, prefix: str, rest: str) -> dict[str, Any]:
    from shardq.web.auth import UPSTREAM_IDENTITY

    host, _, port = request.get_host().partition(":")
    headers = [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in request.headers.items()
        if name.lower() not in _DROPPED
    ]
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method or "GET",
        "scheme": request.scheme or "http",
        "path": prefix + "/" + rest,
        "root_path": prefix,
        "query_string": request.META.get("QUERY_STRING", "").encode("latin-1"),
        "headers": headers,
        "client": (request.META.get("REMOTE_ADDR") or "unknown", 0),
        "server": (host, int(port) if port.isdigit() else (443 if request.is_secure() else 80)),
        UPSTREAM_IDENTITY: _identity(request),
    }


async def _call(asgi_app: Any, scope: dict[str, Any], body: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """Run one HTTP request through ``asgi_app``; its status, headers and whole body."""
    sent_body = False
    started: dict[str, Any] = {}
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent_body
        if sent_body:
            return {"type": "http.disconnect"}
        sent_body = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            started.update(message)
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await asgi_app(scope, receive, send)
    return started["status"], list(started.get("headers", [])), b"".join(chunks)


@csrf_exempt  # the dashboard checks its own CSRF token on every POST (see the module doc)
def dashboard_view(request: HttpRequest, rest: str = "") -> HttpResponse:
    """Every dashboard URL under the include's prefix: ``rest`` is the path below it."""
    user = request.user
    if not (user.is_active and user.is_staff):
        return redirect_to_login(request.get_full_path())
    prefix = (request.path[: len(request.path) - len(rest)] if rest else request.path).rstrip("/")
    if rest == "login":  # the token form: a staff user is already in
        return HttpResponseRedirect(prefix + "/")
    status, headers, body = async_to_sync(_call)(_dashboard(), _scope(request, prefix, rest), request.body)
    response = HttpResponse(body, status=status)
    for name, value in headers:
        key = name.decode("latin-1")
        if key.lower() not in ("content-length", "set-cookie"):
            response[key] = value.decode("latin-1")
    return response
