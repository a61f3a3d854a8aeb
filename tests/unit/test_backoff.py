"""The pure retry policy."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardq import backoff


def test_exponential_delay_doubles_from_base_up_to_the_cap():
    assert [backoff.exponential_delay(n, base=1, cap=10) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]


@given(attempt=st.integers(1, 10_000), base=st.floats(0.001, 100), cap=st.floats(0.001, 1e6))
def test_retry_delay_is_within_zero_and_the_capped_exponential(attempt, base, cap):
    delay = backoff.retry_delay(attempt, base=base, cap=cap)
    assert 0 <= delay <= min(cap, base * 2 ** min(attempt - 1, 60)) + 1e-9


def test_full_jitter_spreads_retries():
    rng = random.Random(7)
    draws = [backoff.retry_delay(5, base=1, cap=100, rng=rng) for _ in range(1000)]
    assert min(draws) < 2 and max(draws) > 14


@pytest.mark.parametrize(
    "attempts, max_attempts, permanent, outcome",
    [
        (1, 5, False, "retry"),
        (4, 5, False, "retry"),
        (5, 5, False, "dead"),
        (1, 5, True, "dead"),
        (9, 5, False, "dead"),
    ],
)
def test_decide_failure(attempts, max_attempts, permanent, outcome):
    decision = backoff.decide_failure(attempts, max_attempts, permanent=permanent, base=1, cap=10)
    assert decision.outcome.value == outcome


@given(rounds=st.integers(1, 100))
def test_idle_sleep_grows_and_stays_within_bounds(rounds):
    pause = backoff.idle_sleep(rounds, minimum=0.05, maximum=1.0)
    assert 0.025 <= pause <= 1.0


def test_idle_sleep_is_zero_before_any_empty_round():
    assert backoff.idle_sleep(0, minimum=0.05, maximum=1.0) == 0
