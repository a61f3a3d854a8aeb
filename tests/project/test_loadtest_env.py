"""The benchmark's reading of the server's CPU (loadtest.env)."""

from __future__ import annotations

from loadtest.env import agreed_reading


def test_a_backend_reaped_while_the_server_cpu_is_read_is_not_lost():
    # The backend 12 (2.0 s of CPU) ends as a measured cell ends: the first reading took the
    # postmaster's reaped total before it was reaped and scanned the live processes after, so it
    # is in neither; the readings after it count it among the reaped.
    readings = iter([(1.0, 0.5, frozenset({11})), (3.0, 2.5, frozenset({11})), (3.0, 2.5, frozenset({11}))])
    assert agreed_reading(lambda: next(readings)) == 3.0


def test_a_quiet_server_is_read_twice():
    calls = []

    def read():
        calls.append(1)
        return (4.0, 1.0, frozenset({7, 8}))

    assert agreed_reading(read) == 4.0
    assert len(calls) == 2
