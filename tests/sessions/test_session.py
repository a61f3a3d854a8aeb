"""The gateway's sessions: what every connection shardq opens is set up to do, and what every way
a session gives up on an error does with a connection the error broke."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable

import psycopg
import pytest

from shardq.errors import DatabaseUnavailable
from shardq.sessions.borrowed import borrow
from shardq.sessions.session import Session
from shardq.sessions.session_async import AsyncSession


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


def _terminate(pg_db, pid: int) -> None:
    """End the backend ``pid`` and wait (up to 5 s) until it is gone."""
    assert pg_db.sql("SELECT pg_terminate_backend(%(pid)s, 5000) AS ended", {"pid": pid})[0]["ended"]


def test_every_way_a_session_gives_up_on_a_lost_connection_drops_it_and_the_next_call_reconnects(pg_db):
    with Session(pg_db.dsn) as session:
        calls: dict[str, Callable[[], object]] = {
            "statement": lambda: session.fetch_one("stats_now"),
            "raw": lambda: session.execute_raw("SELECT 1"),
            "transaction": lambda: session.transaction(lambda s: s.execute_raw("SELECT 1")),
            "rolled back": lambda: session.rolled_back(lambda s: s.execute_raw("SELECT 1")),
            "explain": lambda: session.explain("stats_now"),
        }
        for what, call in calls.items():
            _terminate(pg_db, session.connection().info.backend_pid)
            with pytest.raises(DatabaseUnavailable):
                call()
            assert session._conn is None, what
            call()  # a new connection


def test_an_asyncio_session_drops_a_lost_connection_the_same_way(pg_db):
    async def main() -> None:
        session = AsyncSession(pg_db.dsn)
        try:
            calls = {
                "statement": lambda: session.fetch_one("stats_now"),
                "transaction": lambda: session.transaction(lambda s: s.fetch_one("stats_now")),
            }
            for what, call in calls.items():
                _terminate(pg_db, (await session.connection()).info.backend_pid)
                with pytest.raises(DatabaseUnavailable):
                    await call()
                assert session._conn is None, what
                await call()
        finally:
            await session.close()

    asyncio.run(main())


def test_a_borrowed_session_never_drops_the_callers_connection_even_a_broken_one(pg_db):
    with psycopg.connect(pg_db.dsn.conninfo, autocommit=True) as conn:
        session = borrow(conn)
        _terminate(pg_db, conn.info.backend_pid)
        with pytest.raises(DatabaseUnavailable):
            session.fetch_one("stats_now")
        assert session._conn is conn
