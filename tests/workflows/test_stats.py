"""Workflow steps waiting for their parents in the stats: counted as waiting, never as ready nor
as an exclusive key's backlog (shardq.admin.stats)."""

from __future__ import annotations

import shardq
from shardq.cli.terminal import queues_table


def test_steps_waiting_for_their_parents_are_counted_as_waiting_not_ready_nor_backlog(db):
    app = shardq.App(db.dsn)
    try:

        @app.task(name="t", queue="q")
        def t(n: int) -> None: ...

        wf = app.workflow("chain")
        wf.chain(t.step(n=1), t.step(n=2), t.step(n=3))
        wf.enqueue()
    finally:
        app.close()
    db.make_task("q", exclusive_key="k")
    db.make_task("q", state="backlog", exclusive_key="k")
    q = db.client.stats().queues["q"]
    assert (q.ready, q.backlog) == (2, 1)  # the key's entry only: the two steps are not in a backlog
    assert q.waiting == 2
    assert q.due_depth == 2
    assert sum(d.waiting for d in q.per_bucket.values()) == 2
    assert db.client.stats().as_json()["queues"]["q"]["waiting"] == 2
    header = [c.header for c in queues_table(db.client.stats()).columns]
    assert "waiting" in header
