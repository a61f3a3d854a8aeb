"""Running a queue until it is empty and checking what was acked: shared by the worker's outcome tests."""

from __future__ import annotations

import threading

import pytest

import shardq


def run_until_empty(client, handler, queues=("q",), **options) -> shardq.WorkerTotals:
    """``client.work(..., until_empty=True)`` on a thread, failing the test (instead of hanging
    it) if the worker does not finish."""
    worker = client.worker(list(queues), handler, until_empty=True, **options)
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False}, daemon=True)
    thread.start()
    thread.join(WORKER_PATIENCE)
    if thread.is_alive():
        worker.stop()
        thread.join(10)
        pytest.fail(f"the worker did not finish its until_empty run within {WORKER_PATIENCE:.0f} s")
    return worker.stats


def assert_good_acked(db, good: set[str]) -> None:
    left = [task_id for task_id in good if db.task_row(task_id) is not None]
    assert not left, f"{len(left)} of {len(good)} tasks whose handler returned were not acked"
    assert not [task_id for task_id in good if db.dead_row(task_id) is not None]


WORKER_PATIENCE = 20.0  # a worker that has not finished its until_empty run by then is hung
