"""Who may use the dashboard: one shared token, presented as ``Authorization: Bearer TOKEN`` or
exchanged once at ``/login`` for a session cookie.

Guarantees:

* :class:`AuthGate` answers every HTTP request but ``/login`` with 401 unless it carries the
  token or a live session cookie, before any route runs: without the token nothing is read or
  changed (static files included). API paths get a JSON error, pages the login form.
* Tokens and CSRF tokens are compared with :func:`hmac.compare_digest`.
* The cookie is ``HttpOnly``, ``SameSite=Strict``, ``Path=/``; it names a random session id
  kept in memory only (a restart logs everyone out). Sessions expire after
  :data:`SESSION_SECONDS`; at most :data:`SESSIONS_MAX` are kept (the oldest go first).
* Every session has its own CSRF token. A state-changing request (POST) authenticated by the
  cookie must repeat it (``X-CSRF-Token`` header or ``csrf`` form field, see :func:`csrf_ok`);
  one authenticated by the bearer header needs none (a browser never adds that header by itself).
* :func:`resolve_token` refuses to serve a non-loopback address without an explicit token.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Any

from ..errors import InvalidInput

COOKIE = "shardq_session"
SESSION_SECONDS = 12 * 3600.0
SESSIONS_MAX = 1000
#: The only path served without the token.
LOGIN_PATH = "/login"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def resolve_token(token: str | None, host: str) -> tuple[str, bool]:
    """The token to require and whether it was generated here. Without one, a loopback server
    gets a fresh ``secrets.token_urlsafe(32)``; any other address raises
    :class:`~shardq.errors.InvalidInput` (a generated token on a public address would be one
    printed line away from anyone who can read the logs, and an open dashboard worse)."""
    if token is not None:
        token = token.strip()
        if len(token) < 8:
            raise InvalidInput("the web token must be at least 8 characters")
        return token, False
    if not is_loopback(host):
        raise InvalidInput(f"refusing to serve {host} without an explicit token: give --token or set SHARDQ_WEB_TOKEN")
    return secrets.token_urlsafe(32), True


@dataclass(frozen=True)
class Identity:
    """How a request proved it holds the token: ``bearer`` (header) or ``cookie`` (a session
    with its ``csrf`` token)."""

    method: str
    session_id: str | None = None
    csrf: str | None = None


class Sessions:
    """Live cookie sessions: session id -> (CSRF token, expiry). Thread-safe."""

    def __init__(self, *, lifetime: float = SESSION_SECONDS, limit: int = SESSIONS_MAX,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._items: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self._lock = threading.Lock()
        self._lifetime = lifetime
        self._limit = limit
        self._clock = clock

    def create(self) -> tuple[str, str]:
        """A new (session id, CSRF token)."""
        session_id, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        with self._lock:
            self._items[session_id] = (csrf, self._clock() + self._lifetime)
            while len(self._items) > self._limit:
                self._items.popitem(last=False)
        return session_id, csrf

    def csrf_of(self, session_id: str) -> str | None:
        """The CSRF token of a live session, or None (unknown or expired)."""
        with self._lock:
            found = self._items.get(session_id)
            if found is None:
                return None
            if found[1] < self._clock():
                del self._items[session_id]
                return None
            return found[0]

    def end(self, session_id: str) -> None:
        with self._lock:
            self._items.pop(session_id, None)


class Auth:
    """The token and the sessions of one dashboard."""

    def __init__(self, token: str, sessions: Sessions | None = None) -> None:
        self._token = token.encode()
        self.sessions = sessions or Sessions()

    def token_ok(self, supplied: str | None) -> bool:
        return supplied is not None and hmac.compare_digest(supplied.encode(), self._token)

    def identify(self, headers: dict[str, str]) -> Identity | None:
        """The identity a request's headers prove, or None."""
        authorization = headers.get("authorization", "")
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "bearer" and self.token_ok(value.strip()):
            return Identity("bearer")
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:  # noqa: BLE001 - http.cookies raises CookieError and others on junk: no session
            return None
        morsel = cookie.get(COOKIE)
        if morsel is None or not morsel.value:
            return None
        csrf = self.sessions.csrf_of(morsel.value)
        return Identity("cookie", morsel.value, csrf) if csrf is not None else None


def csrf_ok(identity: Identity, supplied: str | None) -> bool:
    """Whether a state-changing request may go ahead: bearer requests always, cookie requests
    only with their session's CSRF token."""
    if identity.method == "bearer":
        return True
    return identity.csrf is not None and supplied is not None and hmac.compare_digest(
        supplied.encode(), identity.csrf.encode()
    )


def session_cookie(session_id: str) -> str:
    """The ``Set-Cookie`` value that opens a session."""
    return f"{COOKIE}={session_id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={int(SESSION_SECONDS)}"


def expired_cookie() -> str:
    return f"{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"


class AuthGate:
    """ASGI middleware: requests without the token never reach a route (see the module doc).
    ``refuse(scope)`` builds the 401 response (JSON for ``/api/``, the login form otherwise).
    The identity is left in ``scope["state"]["identity"]``."""

    def __init__(self, app: ASGIApp, auth: Auth, refuse: Callable[[Scope], ASGIApp]) -> None:
        self.app = app
        self.auth = auth
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] == LOGIN_PATH:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        identity = self.auth.identify(headers)
        if identity is None:
            await self.refuse(scope)(scope, receive, send)
            return
        scope.setdefault("state", {})["identity"] = identity
        await self.app(scope, receive, send)
