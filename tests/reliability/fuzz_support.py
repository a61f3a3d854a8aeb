"""The fuzz suites' modes, hypothesis settings and tallies, shared by the task and Spark fuzzers."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

MODES = [pytest.param("fast", id="fast"), pytest.param("full", id="full", marks=pytest.mark.slow)]


def fuzz_settings(mode: str):
    return settings(
        max_examples=SIZES[mode],
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


class Tally:
    def __init__(self, figures, target: str) -> None:
        self.figures, self.target = figures, target
        self.tried = self.accepted = self.rejected = self.failures = 0

    def ok(self) -> None:
        self.tried += 1
        self.accepted += 1

    def no(self) -> None:
        self.tried += 1
        self.rejected += 1

    def save(self, note: str | None = None) -> None:
        self.figures.add(
            "fuzz",
            target=self.target,
            tried=self.tried,
            accepted=self.accepted,
            rejected=self.rejected,
            failures=self.failures,
            note=note,
        )


SIZES = {"fast": 40, "full": int(os.environ.get("SHARDQ_FUZZ_EXAMPLES", "400"))}
