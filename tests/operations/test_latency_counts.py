"""The handled counts and latency sums over one queue's settled outcomes (shardq.worker.latency), without
a database: each task's wait from due to start and its lead time from enqueue to its end."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest

from shardq.models.stats import Activity
from shardq.worker import latency
from shardq.worker.inflight import ACK, FAIL

T0 = dt.datetime(2026, 11, 27, 12, 0, tzinfo=dt.UTC)


def outcome(*, attempt=1, kind=ACK, due=0.0, enqueued=0.0, ended=10.0, seconds=1.0):
    """A settled task: due and enqueued ``due``/``enqueued`` seconds after T0, its handler ran
    ``seconds`` and returned ``ended`` seconds after T0 (None: it did not run)."""
    claimed = SimpleNamespace(
        attempt=attempt,
        key=SimpleNamespace(exec_time=T0 + dt.timedelta(seconds=due)),
        created_at=T0 + dt.timedelta(seconds=enqueued),
    )
    return SimpleNamespace(
        claimed=claimed, kind=kind, seconds=seconds, ended_at=None if ended is None else T0.timestamp() + ended
    )


def test_first_attempts_add_their_wait_from_due_to_start_and_acks_their_time_from_enqueue():
    counts = Activity()
    latency.count(
        counts,
        [
            outcome(due=2.0, enqueued=1.0, ended=10.0, seconds=3.0),  # waited 5, lead 9
            outcome(due=4.0, enqueued=4.0, ended=6.0, seconds=0.5),
        ],
    )  # waited 1.5, lead 2
    assert (counts.handled, counts.first_starts, counts.lead_acks) == (2, 2, 2)
    assert counts.handler_seconds == pytest.approx(3.5)
    assert counts.start_wait_seconds == pytest.approx(6.5, abs=1e-6)
    assert counts.lead_seconds == pytest.approx(11.0, abs=1e-6)


def test_a_retry_adds_no_start_a_failure_no_lead_time_and_an_unrun_task_nothing():
    counts = Activity()
    latency.count(
        counts,
        [
            outcome(attempt=2, ended=10.0),
            outcome(kind=FAIL, due=1.0, ended=5.0, seconds=1.0),
            outcome(ended=None, seconds=None),
        ],
    )
    assert counts.handled == 2 and counts.handler_seconds == pytest.approx(2.0)  # the unrun one is not counted
    assert counts.first_starts == 1 and counts.start_wait_seconds == pytest.approx(3.0, abs=1e-6)
    assert counts.lead_acks == 1 and counts.lead_seconds == pytest.approx(10.0, abs=1e-6)


def test_a_worker_clock_behind_the_database_never_makes_a_sum_negative():
    counts = Activity()
    latency.count(counts, [outcome(due=20.0, enqueued=20.0, ended=10.0, seconds=1.0)])
    assert (counts.start_wait_seconds, counts.lead_seconds) == (0.0, 0.0)
    assert (counts.first_starts, counts.lead_acks) == (1, 1)
