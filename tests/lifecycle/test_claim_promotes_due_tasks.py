"""When a claim promotes due scheduled tasks: never between leasing tasks and handing them out."""

from __future__ import annotations

import datetime as dt

from shardq.lifecycle.claim import Consumer
from tests.support.factories import utcnow


def test_a_claim_that_found_ready_tasks_hands_them_out_before_promoting(db):
    ready = db.make_task("q")
    due = db.make_task("q", state="scheduled", exec_time=utcnow() - dt.timedelta(seconds=5))
    consumer = Consumer(db.store, ["q"])
    first = consumer.claim()
    # One statement: the ready task went out without waiting for a promote and a second claim.
    assert [t.id for t in first.tasks] == [ready.id] and first.statements == 1
    second = consumer.claim()  # the promote it owed comes first, and the due task is claimed
    assert [t.id for t in second.tasks] == [due.id]


def test_a_claim_that_found_nothing_promotes_and_claims_again_at_once(db):
    due = db.make_task("q", state="scheduled", exec_time=utcnow() - dt.timedelta(seconds=5))
    found = Consumer(db.store, ["q"]).claim()
    assert [t.id for t in found.tasks] == [due.id]
