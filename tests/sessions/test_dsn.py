"""Connection strings: what is accepted, and that a password never shows."""

from __future__ import annotations

import pytest

from shardq import InvalidInput
from shardq.sessions.dsn import Dsn


def test_a_nul_character_is_refused_before_libpq_reads_the_password_as_another_field():
    # libpq stops at the NUL: "postgresql://:SECRET" alone parses with the password as the port,
    # which a redacted DSN then shows (found by tests/reliability/test_fuzz.py).
    with pytest.raises(InvalidInput) as refused:
        Dsn.parse("postgresql://:S3cret\x00@[::1:0/")
    assert "S3cret" not in str(refused.value)


def test_a_password_is_hidden_from_str_and_repr():
    dsn = Dsn.parse("postgresql://user:S3cret@localhost:5432/db")
    assert "S3cret" not in str(dsn) and "S3cret" not in repr(dsn)
    assert dsn.password() == "S3cret"
