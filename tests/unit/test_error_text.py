"""Error texts as stored: whatever a handler raised becomes text a database accepts."""

from __future__ import annotations

import pytest

from shardq.error_text import ERROR_TEXT_MAX, TRUNCATED_MARKER, describe, storable


class StrRaises(Exception):
    def __str__(self):
        raise RuntimeError("no text for you")


class StrNotAString(Exception):
    def __str__(self):
        return 42  # on purpose: str() of it raises TypeError


@pytest.mark.parametrize(
    "text, stored",
    [
        ("plain", "plain"),
        ("nul\x00byte", "nul\ufffdbyte"),
        ("lone \udcff surrogate", "lone \ufffd surrogate"),
        ("bytes " + b"\xff\xfe".decode("utf-8", "surrogateescape"), "bytes \ufffd\ufffd"),
        ("é ü 日本", "é ü 日本"),
        (None, None),
    ],
)
def test_storable_replaces_what_a_database_refuses_and_keeps_the_rest(text, stored):
    assert storable(text) == stored


def test_a_long_text_is_cut_to_the_limit_with_a_marker():
    stored = storable("x" * 5_000_000)
    assert stored is not None and len(stored) == ERROR_TEXT_MAX and stored.endswith(TRUNCATED_MARKER)
    assert storable("y" * ERROR_TEXT_MAX) == "y" * ERROR_TEXT_MAX


@pytest.mark.parametrize(
    "exc, expected",
    [
        (ValueError("bad \x00 value"), "ValueError: bad \ufffd value"),
        (StrRaises(), "StrRaises: <exception str() failed>"),
        (StrNotAString(), "StrNotAString"),
        (KeyboardInterrupt(), "KeyboardInterrupt"),
    ],
)
def test_describe_never_raises_and_gives_storable_text(exc, expected):
    text = describe(exc)
    assert expected in text
    assert storable(text) == text
