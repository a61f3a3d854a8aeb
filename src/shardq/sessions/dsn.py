"""Where the database is: :class:`Dsn` (a URL or conninfo, with the engine a scheme names), and
removing passwords from any text that may quote one (:func:`redact_text`)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from shardq.engine import engine_for_url_scheme
from shardq.engine.base import Engine
from shardq.errors import InvalidInput
from shardq.sessions.embedded import EmbeddedServer

CONNECT_TIMEOUT_SECONDS = 10


LIBPQ_URL_SCHEMES = ("postgresql", "postgres")


@dataclass(frozen=True)
class Dsn:
    """A validated connection string. ``str()`` and ``repr()`` hide the password."""

    conninfo: str
    #: The engine the URL scheme named (``cockroachdb://``), or None: the server tells at connect.
    named_engine: Engine | None = None

    @classmethod
    def parse(cls, text: str) -> Dsn:
        """Accept ``postgresql://``/``postgres://`` URLs, ``cockroachdb://`` URLs (same syntax,
        CockroachDB assumed) and libpq ``key=value`` strings."""
        if not isinstance(text, str) or not text.strip():
            raise InvalidInput("DSN must be a non-empty string")
        text = text.strip()
        if "\x00" in text:  # libpq reads C strings: it would parse only what precedes the NUL
            raise InvalidInput("malformed DSN: it contains a NUL character")
        named = None
        if "://" in text:
            scheme, rest = text.split("://", 1)
            named = engine_for_url_scheme(scheme)
            if named is not None:
                text = "postgresql://" + rest
            elif scheme not in LIBPQ_URL_SCHEMES:
                raise InvalidInput(f"unsupported DSN scheme {scheme!r}: use postgresql:// or cockroachdb://")
        try:
            params = conninfo_to_dict(text)
        except psycopg.ProgrammingError as exc:
            detail = redact_text(str(exc), text).strip()  # redact first: a password may hold a line break
            raise InvalidInput(f"malformed DSN: {detail.splitlines()[0] if detail else 'unparsable'}") from None
        params.setdefault("connect_timeout", str(CONNECT_TIMEOUT_SECONDS))
        return cls(make_conninfo(**_strings(params)), named)

    @property
    def redacted(self) -> str:
        params = conninfo_to_dict(self.conninfo)
        if "password" in params:
            params["password"] = "***"
        return make_conninfo(**_strings(params))

    def __str__(self) -> str:
        return self.redacted

    def __repr__(self) -> str:
        return f"Dsn({self.redacted!r})"

    def password(self) -> str | None:
        password = conninfo_to_dict(self.conninfo).get("password")
        return None if password is None else str(password)

    def params(self) -> dict[str, str]:
        """The connection parameters (libpq keywords: host, port, dbname, user, password, …),
        for clients that need them separately (the Spark JDBC URL)."""
        return {key: str(value) for key, value in conninfo_to_dict(self.conninfo).items()}


def conninfo_from_parts(**parts: str | None) -> str:
    """A libpq conninfo string of the given keywords (``dbname``, ``user``, ``host`` …), quoted as
    libpq needs; a part that is None or empty is left out."""
    return make_conninfo(**{key: value for key, value in parts.items() if value})


def _strings(params: Mapping[str, object]) -> dict[str, str]:
    """Connection parameters as libpq keyword strings (psycopg parses some as ints)."""
    return {key: str(value) for key, value in params.items() if value is not None}


_URL_AUTHORITY = re.compile(r"^\s*[A-Za-z][A-Za-z0-9+.\-]*://([^/]*)")


_PASSWORD_PARAM = re.compile(r"(?:^|[\s?&])password\s*=\s*('(?:[^'\\]|\\.)*'?|[^\s&#]*)")


def _password_candidates(text: str) -> set[str]:
    """Every string in ``text`` that may be a password, also when libpq cannot parse ``text``
    (its messages about a malformed DSN quote the offending part, password and all)."""
    found: set[str] = set()
    try:
        password = conninfo_to_dict(text).get("password")
    except psycopg.Error:
        password = None
    if password:
        found.add(str(password))
    authority = _URL_AUTHORITY.match(text)
    if authority and "@" in authority.group(1):
        # libpq ends the user info at the first "@"; a lenient reader at the last: redact both.
        for userinfo in (authority.group(1).split("@", 1)[0], authority.group(1).rsplit("@", 1)[0]):
            if ":" in userinfo:
                found.add(userinfo.split(":", 1)[1])
    found.update(m.group(1).strip("'") for m in _PASSWORD_PARAM.finditer(text))
    found |= {unquote(p) for p in found}
    return {p for p in found if p}


def redact_text(message: str, secret_source: str) -> str:
    """Remove any password found in ``secret_source`` (a DSN, well-formed or not) from ``message``."""
    for password in sorted(_password_candidates(secret_source), key=len, reverse=True):
        message = message.replace(password, "***")
    return message


def resolve_dsn(dsn: str | Dsn | None = None) -> Dsn:
    """The DSN to use: ``dsn`` if given, else ``SHARDQ_DSN``, else the embedded PostgreSQL
    (started on demand)."""
    if isinstance(dsn, Dsn):
        return dsn
    text = dsn or os.environ.get("SHARDQ_DSN")
    if text:
        return Dsn.parse(text)
    return Dsn.parse(EmbeddedServer().start())
