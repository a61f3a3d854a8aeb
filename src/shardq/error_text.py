"""Error texts as they are stored: whatever a handler raised, made into text a database accepts.

A task's ``last_error`` (and a dead letter's reason) comes from code shardq does not control: an
exception whose ``__str__`` raises or returns something other than a string, a message holding
NUL bytes (PostgreSQL and CockroachDB refuse ``\\x00`` in text), lone surrogates (no UTF-8 encoding
exists for them, so the driver cannot even send the statement), or a message of megabytes.

Guarantees
    * :func:`describe` never raises, whatever the exception does.
    * :func:`storable` returns valid text without NUL bytes of at most :data:`ERROR_TEXT_MAX`
      characters; a longer text is cut and ends with :data:`TRUNCATED_MARKER`. It changes nothing
      in a text that is already storable and short enough.

Does not
    * keep the exact bytes: a NUL becomes U+FFFD, and so does each unencodable code point.
"""

from __future__ import annotations

import traceback

#: The longest stored error text, in characters (the marker included): ``last_error`` is for
#: people to read, and the row stays small.
ERROR_TEXT_MAX = 4000
#: Ends a text that was cut to :data:`ERROR_TEXT_MAX`.
TRUNCATED_MARKER = " … [truncated]"

_REPLACEMENT = "\ufffd"


def storable(text: str | None) -> str | None:
    """``text`` as a database stores it: NUL bytes and unencodable code points replaced by U+FFFD,
    cut to :data:`ERROR_TEXT_MAX` characters with :data:`TRUNCATED_MARKER`. None stays None."""
    if text is None:
        return None
    if not isinstance(text, str):  # a caller passed something else: store what it says it is
        text = _safe_str(text)
    if "\x00" in text:
        text = text.replace("\x00", _REPLACEMENT)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates (e.g. bytes decoded with "surrogateescape")
        text = _replace_surrogates(text)
    if len(text) > ERROR_TEXT_MAX:
        text = text[: ERROR_TEXT_MAX - len(TRUNCATED_MARKER)] + TRUNCATED_MARKER
    return text


def describe(exc: BaseException) -> str:
    """The exception as a task's ``last_error``: its type and message (the last line(s) of what a
    traceback would print), made :func:`storable`. Never raises."""
    try:
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    except BaseException:  # noqa: BLE001 - a hostile exception must not take the worker with it
        text = f"{_safe_name(exc)}: <the exception could not be described>"
    return storable(text) or _safe_name(exc)


def _replace_surrogates(text: str) -> str:
    return "".join(_REPLACEMENT if "\ud800" <= ch <= "\udfff" else ch for ch in text)


def _safe_str(value: object) -> str:
    try:
        text = str(value)
    except BaseException:  # noqa: BLE001 - str() of foreign objects may raise anything
        return f"<{_safe_name(value)} object>"
    return text if isinstance(text, str) else f"<{_safe_name(value)} object>"


def _safe_name(value: object) -> str:
    try:
        name = type(value).__name__ if not isinstance(value, BaseException) else type(value).__qualname__
    except BaseException:  # noqa: BLE001
        return "Exception"
    return name if isinstance(name, str) else "Exception"
