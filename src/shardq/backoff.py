"""Pure retry decisions: how long to wait, and whether a failed task gets another go.

No I/O here; the consumer and the reaper call these and hand the SQL only the computed
delay, so the policy is unit-testable without a database.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import Enum

# 2**62 seconds overflows any timestamp; clamp the exponent long before that.
_MAX_EXPONENT = 60


def exponential_delay(attempt: int, *, base: float, cap: float) -> float:
    """The un-jittered delay before retry number ``attempt`` (1-based): ``base * 2**(attempt-1)``,
    never more than ``cap``."""
    if attempt < 1:
        raise ValueError("attempt is 1-based")
    exponent = min(attempt - 1, _MAX_EXPONENT)
    return min(cap, base * (2.0**exponent))


def full_jitter(delay: float, rng: random.Random | None = None) -> float:
    """A uniform draw from ``[0, delay]`` ("full jitter"): retries of tasks that failed
    together spread out instead of returning as a herd."""
    return (rng or random).uniform(0.0, delay)


def retry_delay(
    attempt: int, *, base: float, cap: float, jitter: float = 1.0, rng: random.Random | None = None
) -> float:
    """Exponential backoff for retry number ``attempt``, of which the share ``jitter`` is drawn at
    random: 1.0 (the default) is full jitter, uniform over ``[0, delay]``; 0.0 is no jitter."""
    delay = exponential_delay(attempt, base=base, cap=cap)
    return delay * (1.0 - jitter) + full_jitter(delay * jitter, rng)


class Outcome(Enum):
    RETRY = "retry"
    DEAD = "dead"


@dataclass(frozen=True)
class Decision:
    """What happens to a task whose attempt failed (or whose lease expired)."""

    outcome: Outcome
    delay_seconds: float = 0.0


def decide_failure(
    attempts: int,
    max_attempts: int,
    *,
    permanent: bool,
    base: float,
    cap: float,
    jitter: float = 1.0,
    rng: random.Random | None = None,
) -> Decision:
    """Retry with backoff, or dead-letter when the failure is permanent or the attempt
    just spent (``attempts`` counts it) was the last one."""
    if permanent or attempts >= max_attempts:
        return Decision(Outcome.DEAD)
    # A lease always charges an attempt; max() only guards rows edited by hand.
    return Decision(Outcome.RETRY, retry_delay(max(attempts, 1), base=base, cap=cap, jitter=jitter, rng=rng))


def idle_sleep(empty_rounds: int, *, minimum: float, maximum: float, rng: random.Random | None = None) -> float:
    """How long a consumer sleeps after ``empty_rounds`` consecutive rounds found nothing:
    doubling from ``minimum``, capped at ``maximum``, jittered to 50-100 % so idle
    consumers do not poll in lockstep."""
    if empty_rounds < 1:
        return 0.0
    ceiling = min(maximum, minimum * (2.0 ** min(empty_rounds - 1, _MAX_EXPONENT)))
    return (rng or random).uniform(ceiling / 2.0, ceiling)
