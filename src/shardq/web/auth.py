"""Who may use the dashboard: one shared token, presented as ``Authorization: Bearer TOKEN`` or
exchanged once at ``/login`` for a session cookie.

Guarantees:

* :class:`AuthGate` answers every HTTP request but ``/login`` with 401 unless it carries the
  token or a live session cookie, before any route runs: without the token nothing is read or
  changed (static files included). API paths get a JSON error, pages the login form.
* Tokens and CSRF tokens are compared with :func:`hmac.compare_digest`.
* The cookie is ``HttpOnly``, ``SameSite=Strict``, its ``Path`` the mount prefix (``/`` at the
  top, ``/queue-admin`` under ``Mount("/queue-admin", ...)``: see :mod:`shardq.web.mount`); it names a random session id
  kept in memory only (a restart logs everyone out). Sessions expire after
  :data:`SESSION_SECONDS`; at most :data:`SESSIONS_MAX` are kept (the oldest go first).
* Every session has its own CSRF token. A state-changing request (POST) authenticated by the
  cookie must repeat it (``X-CSRF-Token`` header or ``csrf`` form field, see :func:`csrf_ok`);
  one authenticated by the bearer header needs none (a browser never adds that header by itself).
* Cookies are parsed one by one (Starlette's parser): a cookie this dashboard cannot read,
  such as ``prefs={"theme":"dark"}`` set by another app on the same host (browsers share
  cookies across ports), is skipped instead of hiding the session cookie after it.
* The token is compared as UTF-8 bytes, so a non-ASCII token works at ``/login`` and as a
  Bearer header alike (header bytes are taken as sent, not re-encoded).
* Wrong tokens are limited per client address (:mod:`shardq.web.throttle`): after a few, every
  attempt from that address gets 429 with ``Retry-After`` until its delay has passed.
* A second, read-only token may be given (``--read-token``): a request or session that proved
  only that token sees every page and API read and changes nothing. :class:`AuthGate` answers
  every request of it other than GET and HEAD with 403 before any route runs (``/login`` and
  ``/logout`` aside), so every action, present or future, is refused the same way.
* An enclosing application that signs people in itself (Django's staff login) may hand over
  the :class:`Identity` it proved in the scope (:data:`UPSTREAM_IDENTITY`); the gate takes it only
  from a dashboard built with ``upstream=True`` (``create_app(..., upstream_login=True)``), which
  must then be reachable only through that application. Its forms repeat the CSRF token the
  identity carries, and its read-only identities are refused changes like the read-only token's.
* :func:`resolve_token` refuses to serve a non-loopback address without an explicit token, and
  a chosen token shorter than :data:`TOKEN_MIN_CHARS`.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import cookie_parser

from shardq.errors import InvalidInput
from shardq.web.mount import route_path
from shardq.web.throttle import Throttle

COOKIE = "shardq_session"
SESSION_SECONDS = 12 * 3600.0
SESSIONS_MAX = 1000
#: The only path served without the token.
LOGIN_PATH = "/login"
#: Methods a read-only identity may use: reads only.
READ_METHODS = frozenset({"GET", "HEAD"})
#: Posts a read-only session may still make (ending its own session changes no data).
READ_ONLY_MAY_POST = frozenset({"/logout"})
#: The scope key under which an enclosing application that signs people in itself (Django's staff
#: login, :mod:`shardq.contrib.django.dashboard`) hands over the :class:`Identity` it proved.
UPSTREAM_IDENTITY = "shardq.identity"
#: The shortest token ``--token`` / ``SHARDQ_WEB_TOKEN`` may give (a generated one has 43).
TOKEN_MIN_CHARS = 16

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
        if len(token) < TOKEN_MIN_CHARS:
            raise InvalidInput(f"the web token must be at least {TOKEN_MIN_CHARS} characters (it has {len(token)})")
        return token, False
    if not is_loopback(host):
        raise InvalidInput(f"refusing to serve {host} without an explicit token: give --token or set SHARDQ_WEB_TOKEN")
    return secrets.token_urlsafe(32), True


def resolve_read_token(read_token: str | None, token: str) -> str | None:
    """The read-only token to accept besides ``token`` (None: none). It must have
    :data:`TOKEN_MIN_CHARS` characters and differ from the full token (else a read-only user
    would hold the full one); :class:`~shardq.errors.InvalidInput` otherwise."""
    if read_token is None:
        return None
    read_token = read_token.strip()
    if len(read_token) < TOKEN_MIN_CHARS:
        raise InvalidInput(
            f"the read-only token must be at least {TOKEN_MIN_CHARS} characters (it has {len(read_token)})"
        )
    if hmac.compare_digest(read_token.encode(), token.encode()):
        raise InvalidInput("the read-only token must differ from the full token")
    return read_token


@dataclass(frozen=True)
class Identity:
    """How a request proved it holds the token: ``bearer`` (header) or ``cookie`` (a session
    with its ``csrf`` token); ``read_only`` when it holds only the read-only token. ``upstream``:
    the enclosing application signed the request's ``user`` in (see :class:`AuthGate`); its
    ``csrf`` token is the one its forms must repeat."""

    method: str
    session_id: str | None = None
    csrf: str | None = None
    read_only: bool = False
    user: str | None = None

    def describe(self, address: str) -> str:
        """Who acted, for the audit log: the kind of token, how it was shown, a short tag of the
        session (never the session id itself), the client's address; or the user the enclosing
        application signed in."""
        if self.method == "upstream":
            return f"{'read-only' if self.read_only else 'full access'}, {self.user or 'unnamed user'}, from {address}"
        role = "read-only token" if self.read_only else "full token"
        if self.method == "cookie" and self.session_id:
            tag = hashlib.sha256(self.session_id.encode()).hexdigest()[:8]
            return f"{role}, session {tag}, from {address}"
        return f"{role}, bearer header, from {address}"


class Sessions:
    """Live cookie sessions: session id -> (CSRF token, expiry). Thread-safe."""

    def __init__(
        self,
        *,
        lifetime: float = SESSION_SECONDS,
        limit: int = SESSIONS_MAX,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._items: OrderedDict[str, tuple[str, float, bool]] = OrderedDict()
        self._lock = threading.Lock()
        self._lifetime = lifetime
        self._limit = limit
        self._clock = clock

    def create(self, *, read_only: bool = False) -> tuple[str, str]:
        """A new (session id, CSRF token); ``read_only`` for a session opened with the read-only token."""
        session_id, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        with self._lock:
            self._items[session_id] = (csrf, self._clock() + self._lifetime, read_only)
            while len(self._items) > self._limit:
                self._items.popitem(last=False)
        return session_id, csrf

    def csrf_of(self, session_id: str) -> str | None:
        """The CSRF token of a live session, or None (unknown or expired)."""
        found = self.lookup(session_id)
        return found[0] if found else None

    def lookup(self, session_id: str) -> tuple[str, bool] | None:
        """(CSRF token, read-only) of a live session, or None (unknown or expired)."""
        with self._lock:
            found = self._items.get(session_id)
            if found is None:
                return None
            if found[1] < self._clock():
                del self._items[session_id]
                return None
            return found[0], found[2]

    def end(self, session_id: str) -> None:
        with self._lock:
            self._items.pop(session_id, None)


class Auth:
    """The token, the sessions and the wrong-token throttle of one dashboard. ``upstream``: an
    :class:`Identity` the enclosing application put in the scope (:data:`UPSTREAM_IDENTITY`) is
    taken as proven (default False: only the token and its sessions let anyone in)."""

    def __init__(
        self,
        token: str,
        sessions: Sessions | None = None,
        throttle: Throttle | None = None,
        *,
        read_token: str | None = None,
        upstream: bool = False,
    ) -> None:
        self._token = token.encode()
        self._read_token = read_token.encode() if read_token else None
        self.sessions = sessions or Sessions()
        self.throttle = throttle or Throttle()
        self.upstream = upstream

    def token_ok(self, supplied: str | bytes | None) -> bool:
        """Whether ``supplied`` is the token (text is compared as its UTF-8 bytes)."""
        if supplied is None:
            return False
        raw = supplied.encode() if isinstance(supplied, str) else supplied
        return hmac.compare_digest(raw, self._token)

    def read_token_ok(self, supplied: str | bytes | None) -> bool:
        """Whether ``supplied`` is the read-only token (False when there is none)."""
        if supplied is None or self._read_token is None:
            return False
        raw = supplied.encode() if isinstance(supplied, str) else supplied
        return hmac.compare_digest(raw, self._read_token)

    @staticmethod
    def bearer(headers: dict[str, str]) -> bytes | None:
        """The bytes after ``Authorization: Bearer``, as sent (None without such a header).
        Header values arrive decoded as latin-1, which maps bytes one to one: encoding them back
        gives what the client sent, so a UTF-8 token matches."""
        scheme, _, value = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return None
        return value.strip().encode("latin-1")

    def session(self, headers: dict[str, str]) -> Identity | None:
        """The live session the ``Cookie`` header names, or None. Cookies that cannot be read
        are skipped, not fatal (see the module doc)."""
        session_id = cookie_parser(headers.get("cookie", "")).get(COOKIE)
        if not session_id:
            return None
        found = self.sessions.lookup(session_id)
        return Identity("cookie", session_id, found[0], read_only=found[1]) if found is not None else None

    def identify(self, headers: dict[str, str]) -> Identity | None:
        """The identity a request's headers prove, or None (no throttling: see :class:`AuthGate`)."""
        bearer = self.bearer(headers)
        if self.token_ok(bearer):
            return Identity("bearer")
        if self.read_token_ok(bearer):
            return Identity("bearer", read_only=True)
        return self.session(headers)


def csrf_ok(identity: Identity, supplied: str | None) -> bool:
    """Whether a state-changing request may go ahead: bearer requests always, cookie requests
    only with their session's CSRF token."""
    if identity.method == "bearer":
        return True
    return (
        identity.csrf is not None
        and supplied is not None
        and hmac.compare_digest(supplied.encode(), identity.csrf.encode())
    )


def session_cookie(session_id: str, prefix: str = "") -> str:
    """The ``Set-Cookie`` value that opens a session of the dashboard mounted at ``prefix`` (the
    cookie goes only to the dashboard's own paths, not to the application around it)."""
    return f"{COOKIE}={session_id}; Path={prefix or '/'}; HttpOnly; SameSite=Strict; Max-Age={int(SESSION_SECONDS)}"


def expired_cookie(prefix: str = "") -> str:
    """The ``Set-Cookie`` value that ends the session cookie :func:`session_cookie` set at ``prefix``."""
    return f"{COOKIE}=; Path={prefix or '/'}; HttpOnly; SameSite=Strict; Max-Age=0"


def client_address(scope: Scope) -> str:
    """The address the request came from (what the throttle counts by)."""
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


class AuthGate:
    """ASGI middleware: requests without the token never reach a route (see the module doc).
    ``refuse(scope, retry_after)`` builds the refusal: 401 when ``retry_after`` is None, else 429
    (JSON for ``/api/``, the login form otherwise); ``forbid(scope)`` the 403 for a read-only
    identity's request that is not a read. A wrong Bearer token counts against the
    client's address; while the address must wait, its Bearer tokens are not even compared.
    The identity is left in ``scope["state"]["identity"]``."""

    def __init__(
        self,
        app: ASGIApp,
        auth: Auth,
        refuse: Callable[[Scope, int | None], ASGIApp],
        forbid: Callable[[Scope], ASGIApp],
    ) -> None:
        self.app = app
        self.auth = auth
        self.refuse = refuse
        self.forbid = forbid

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = route_path(scope)  # the path inside the dashboard, wherever it is mounted
        if path == LOGIN_PATH:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        identity: Identity | None = None
        upstream = scope.get(UPSTREAM_IDENTITY)
        if self.auth.upstream and isinstance(upstream, Identity) and upstream.method == "upstream":
            identity = upstream  # proven by the enclosing application (only when the dashboard was built to trust it)
        bearer = self.auth.bearer(headers) if identity is None else None
        if bearer is not None:
            address = client_address(scope)
            wait = self.auth.throttle.wait_seconds(address)
            if wait:
                await self.refuse(scope, wait)(scope, receive, send)
                return
            if self.auth.token_ok(bearer):
                self.auth.throttle.succeeded(address)
                identity = Identity("bearer")
            elif self.auth.read_token_ok(bearer):
                self.auth.throttle.succeeded(address)
                identity = Identity("bearer", read_only=True)
            else:
                self.auth.throttle.failed(address)
        if identity is None:
            identity = self.auth.session(headers)
        if identity is None:
            await self.refuse(scope, None)(scope, receive, send)
            return
        if identity.read_only and scope["method"] not in READ_METHODS and path not in READ_ONLY_MAY_POST:
            await self.forbid(scope)(scope, receive, send)
            return
        scope.setdefault("state", {})["identity"] = identity
        await self.app(scope, receive, send)
