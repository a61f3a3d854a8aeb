"""``until_empty`` with workflows: a worker does not stop while an ack that is releasing steps
is still in flight when its last claim round began (shardq.worker.fetcher)."""

from __future__ import annotations

import threading

import shardq
from shardq.lifecycle.claim import Consumer
from shardq.worker.inflight import InFlightTable


def test_a_step_released_by_an_ack_that_settled_during_an_empty_round_still_runs(db, monkeypatch):
    claimed, forgotten = threading.Event(), threading.Event()
    real_claim, real_add, real_forget = Consumer.claim, InFlightTable.add, InFlightTable.forget

    def add(self, entries):
        real_add(self, entries)
        claimed.set()

    def forget(self, outcomes):
        real_forget(self, outcomes)
        forgotten.set()

    def claim(self, *args, **kwargs):
        busy = claimed.is_set() and not forgotten.is_set()
        found = real_claim(self, *args, **kwargs)
        if busy and found.round_empty:
            # The round read the tasks before the first step's ack committed (its child still
            # waiting); the ack settles before the round is over.
            assert forgotten.wait(30)
        return found

    monkeypatch.setattr(InFlightTable, "add", add)
    monkeypatch.setattr(InFlightTable, "forget", forget)
    monkeypatch.setattr(Consumer, "claim", claim)
    app = shardq.App(db.dsn)
    ran: list[str] = []
    try:

        @app.task(name="t")
        def t(label: str) -> None:
            ran.append(label)

        wf = app.workflow("two")
        wf.chain(t.step(label="a"), t.step(label="b"))
        handle = wf.enqueue()
        app.work(until_empty=True)
        assert ran == ["a", "b"]
        assert handle.status().state == "succeeded"
    finally:
        app.close()
