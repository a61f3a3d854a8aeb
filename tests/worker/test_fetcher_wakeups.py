"""A settle that finishes while the fetcher's claim round runs is not lost: an ``until_empty``
worker whose round found nothing while a task was in flight looks again at once when that task
was settled during the round, instead of sitting out its idle pause (an ack that committed during
the round may have released a workflow's next step)."""

from __future__ import annotations

import threading
import time

from shardq.lifecycle.claim import Consumer
from shardq.worker import Worker, WorkerConfig

IDLE_SECONDS = 60.0  # the pause a lost wake-up would sit out


def test_a_task_settled_during_an_empty_claim_round_wakes_the_fetcher_at_once(db, monkeypatch):
    db.client.enqueue("q", b"x")
    go = threading.Event()
    claim = Consumer.claim
    rounds: list[int] = []
    worker: Worker | None = None

    def round_during_which_the_task_is_settled(self, *args, **kwargs):
        found = claim(self, *args, **kwargs)
        rounds.append(len(found.tasks))
        if not found.tasks and not go.is_set():
            # The round found nothing while the task runs: let it finish and be settled (acked,
            # forgotten: the settler wakes the fetcher) before this round returns.
            go.set()
            assert worker is not None
            deadline = time.monotonic() + 30
            while worker.table.entries and time.monotonic() < deadline:
                time.sleep(0.01)
            assert not worker.table.entries
        return found

    monkeypatch.setattr(Consumer, "claim", round_during_which_the_task_is_settled)
    config = WorkerConfig(queues=("q",), until_empty=True, idle_min=IDLE_SECONDS, idle_max=IDLE_SECONDS, sweep=False)
    worker = Worker(db.client.new_session, lambda task: go.wait(30), config)
    done = threading.Event()
    totals = []
    thread = threading.Thread(target=lambda: (totals.append(worker.run(install_signal_handlers=False)), done.set()))
    thread.start()
    try:
        # Without the wake-up the fetcher sits out IDLE_SECONDS after that round before it stops.
        assert done.wait(IDLE_SECONDS / 3), f"the fetcher slept through the settle (rounds: {rounds})"
    finally:
        worker.stop()
        thread.join()
    assert totals[0].acked == 1
