"""The gateway's sessions: what every connection shardq opens is set up to do."""

from __future__ import annotations

import datetime as dt

from shardq.sessions.session import Session


def test_a_session_reads_timestamps_in_utc_whatever_the_databases_default_zone(pg_db):
    database = pg_db.sql("SELECT current_database() AS name")[0]["name"]
    pg_db.sql(f"ALTER DATABASE \"{database}\" SET timezone = 'Asia/Kathmandu'")
    with Session(pg_db.dsn) as session:
        row = session.fetch_one("stats_now")
    assert row["as_of"].tzinfo is dt.UTC
    assert abs(row["as_of"] - dt.datetime.now(dt.UTC)) < dt.timedelta(minutes=5)


def test_a_claimed_task_carries_utc_timestamps(db):
    db.client.enqueue("q", b"x")
    claimed = db.store.task_claim_batch(0, "q", 10, 30.0) or [
        t for bucket in range(1, db.layout.visit_count) for t in db.store.task_claim_batch(bucket, "q", 10, 30.0)
    ]
    assert len(claimed) == 1
    task = claimed[0]
    assert task.lease_expires_at.utcoffset() == dt.timedelta(0) and task.created_at.utcoffset() == dt.timedelta(0)
    assert task.lease_expires_at - task.created_at < dt.timedelta(minutes=5)
