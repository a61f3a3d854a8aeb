"""The gateway's sessions: what every connection shardq opens is set up to do."""

from __future__ import annotations

import datetime as dt
import threading

import pytest

from shardq.db import Session
from shardq.errors import DatabaseError
from shardq.worker import Worker, WorkerConfig


def test_a_session_reads_timestamps_in_utc_whatever_the_databases_default_zone(pg_db):
    database = pg_db.sql("SELECT current_database() AS name")[0]["name"]
    pg_db.sql(f"ALTER DATABASE \"{database}\" SET timezone = 'Asia/Kathmandu'")
    with Session(pg_db.dsn) as session:
        row = session.fetch_one("stats_now")
    assert row["as_of"].tzinfo is dt.timezone.utc
    assert abs(row["as_of"] - dt.datetime.now(dt.timezone.utc)) < dt.timedelta(minutes=5)


def test_a_claimed_task_carries_utc_timestamps(db):
    db.client.enqueue("q", b"x")
    claimed = db.store.task_claim_batch(0, "q", 10, 30.0) or [
        t for bucket in range(1, db.layout.visit_count) for t in db.store.task_claim_batch(bucket, "q", 10, 30.0)
    ]
    assert len(claimed) == 1
    task = claimed[0]
    assert task.lease_expires_at.utcoffset() == dt.timedelta(0) and task.created_at.utcoffset() == dt.timedelta(0)
    assert task.lease_expires_at - task.created_at < dt.timedelta(minutes=5)


def _plan_mode(session: Session) -> str:
    return session.execute_raw("SHOW plan_cache_mode")[0]["plan_cache_mode"]


def test_a_session_keeping_generic_plans_asks_for_them_again_after_reconnecting(pg_db):
    with Session(pg_db.dsn) as session:
        session.keep_generic_plans()
        assert _plan_mode(session) == "force_generic_plan"
        pid = session.execute_raw("SELECT pg_backend_pid() AS pid")[0]["pid"]
        pg_db.sql("SELECT pg_terminate_backend(%(pid)s)", {"pid": pid})
        with pytest.raises(DatabaseError):
            session.execute_raw("SELECT 1")
        assert _plan_mode(session) == "force_generic_plan"
        assert session.execute_raw("SELECT pg_backend_pid() AS pid")[0]["pid"] != pid
    with Session(pg_db.dsn) as other:
        assert _plan_mode(other) == "auto"


def test_a_worker_plans_its_claims_once_and_leaves_its_other_sessions_to_the_server(pg_db):
    pg_db.client.enqueue_many("q", [b"x"] * 50)
    sessions: dict[str, Session] = {}

    def new_session() -> Session:
        session = pg_db.client.new_session()
        sessions[threading.current_thread().name] = session
        return session

    modes: dict[str, str] = {}

    def on_event(event, task, details) -> None:
        # Hooks run on the worker's own threads: each asks its thread's session.
        if event in ("claim", "settled") and event not in modes:
            modes[event] = _plan_mode(sessions[threading.current_thread().name])

    worker = Worker(new_session, lambda task: None, WorkerConfig(("q",), batch=10, until_empty=True),
                    on_event=on_event, events=("claim", "settled"))
    assert worker.run(install_signal_handlers=False).acked == 50
    assert modes == {"claim": "force_generic_plan", "settled": "auto"}
