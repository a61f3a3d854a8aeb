"""The home of background chores: one bounded-batch loop, one scheduling loop, the prunes."""

from __future__ import annotations

import logging
import random
import threading

import pytest

from shardq import maintenance
from shardq.errors import DatabaseUnavailable
from shardq.maintenance.batches import until_short_batch
from shardq.maintenance.loop import repeat


def counting_down(rows: int, calls: list[int]):
    """A bounded statement over ``rows`` rows: each call takes at most its limit."""
    left = [rows]

    def statement(limit: int) -> int:
        calls.append(limit)
        taken = min(limit, left[0])
        left[0] -= taken
        return taken

    return statement


@pytest.mark.parametrize(("rows", "calls_made"), [(0, 1), (9, 1), (10, 2), (25, 3)])
def test_batches_stop_at_the_first_short_batch(rows, calls_made):
    calls: list[int] = []
    assert until_short_batch(counting_down(rows, calls), 10) == rows
    assert calls == [10] * calls_made


def test_batches_stop_after_max_batches_and_leave_the_rest_for_the_next_call():
    calls: list[int] = []
    statement = counting_down(100, calls)
    assert until_short_batch(statement, 10, max_batches=3) == 30
    assert until_short_batch(statement, 10, max_batches=None) == 70


def test_the_loop_retries_a_failed_pass_with_backoff_and_logs_it(caplog):
    stop = threading.Event()
    passes: list[str] = []

    def run_once() -> None:
        passes.append("pass")
        if len(passes) == 1:
            raise DatabaseUnavailable("connection lost")
        if len(passes) == 3:
            stop.set()

    with caplog.at_level(logging.WARNING, logger="shardq.test"):
        repeat(
            run_once,
            stop,
            every=0.001,
            retry_max=0.01,
            what="test chore",
            log=logging.getLogger("shardq.test"),
            rng=random.Random(0),
        )
    assert len(passes) == 3
    assert [r.levelno for r in caplog.records] == [logging.WARNING]  # transient: a warning, not an error
    assert "test chore failed (connection lost)" in caplog.records[0].getMessage()


def test_the_loop_does_not_swallow_a_bug():
    def run_once() -> None:
        raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        repeat(run_once, threading.Event(), every=0.001, retry_max=0.01, what="x", log=logging.getLogger("x"))


def test_the_loop_never_runs_once_stopped():
    stop = threading.Event()
    stop.set()
    repeat(lambda: pytest.fail("ran after stop"), stop, every=1.0, retry_max=1.0, what="x", log=logging.getLogger("x"))


def test_the_chores_keep_their_public_paths():
    import shardq
    from shardq.maintenance.reaper import Reaper, ReaperConfig, ReapResult

    assert (shardq.Reaper, shardq.ReaperConfig, shardq.ReapResult) == (Reaper, ReaperConfig, ReapResult)
    assert maintenance.Reaper is Reaper
