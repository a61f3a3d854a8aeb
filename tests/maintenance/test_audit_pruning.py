"""The dashboard's audit log is kept for a bounded time: the reaper's pruning pass deletes entries
older than 90 days (KEEP_AUDIT_SECONDS), in bounded batches, and nothing newer."""

from __future__ import annotations

from shardq.maintenance import pruning
from shardq.maintenance.reaper import Reaper


def _audit(db, days_ago: float, count: int) -> None:
    db.add_audit_rows(days_ago, count)


def _ages(db) -> list[int]:
    return db.audit_ages_in_days()


def test_a_reaper_pass_deletes_audit_entries_past_ninety_days_and_keeps_the_rest(db):
    assert pruning.KEEP_AUDIT_SECONDS == 90 * 86_400
    _audit(db, 120, 3)
    _audit(db, 91, 2)
    _audit(db, 89, 1)
    _audit(db, 0, 2)
    Reaper(db.store).run_once()
    assert _ages(db) == [89, 0, 0]


def test_audit_pruning_works_in_bounded_batches_and_leaves_a_backlog_to_the_next_pass(db, monkeypatch):
    monkeypatch.setattr(pruning, "PRUNE_BATCH", 2)
    monkeypatch.setattr(pruning, "AUDIT_MAX_BATCHES", 2)
    _audit(db, 100, 7)
    _audit(db, 1, 1)
    assert pruning.prune_audit(db.store) == 4
    assert pruning.prune_audit(db.store) == 3
    assert pruning.prune_audit(db.store) == 0
    assert _ages(db) == [1]


def test_a_shorter_retention_can_be_given(db):
    _audit(db, 10, 2)
    _audit(db, 0, 1)
    assert pruning.prune_audit(db.store, keep_seconds=7 * 86_400) == 2
    assert _ages(db) == [0]
