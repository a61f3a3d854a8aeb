"""Migrations: idempotent upgrade, working downgrade, the bucket count at creation."""

from __future__ import annotations

from shardq.migrations import apply as migrate
from shardq.sessions.dsn import Dsn
from shardq.sessions.session import Session


def test_upgrade_is_idempotent_and_downgrade_round_trips(pg_server):
    admin = Dsn.parse(pg_server.url("postgres"))
    with Session(admin) as s:
        s.execute_raw("DROP DATABASE IF EXISTS mig_roundtrip")
        s.execute_raw("CREATE DATABASE mig_roundtrip")
    dsn = Dsn.parse(pg_server.url("mig_roundtrip"))
    first = migrate.upgrade(dsn, buckets=8)
    assert first.changed and first.before is None
    again = migrate.upgrade(dsn, buckets=32)
    assert not again.changed and again.buckets_ignored
    with Session(dsn) as s:
        assert s.fetch_one("layout_get")["bucket_count"] == 8
    down = migrate.downgrade(dsn)
    assert down.after is None
    with Session(dsn) as s:
        tables = s.execute_raw("SELECT table_name FROM information_schema.tables WHERE table_name LIKE 'shardq_%%'")
        assert tables == []
    assert migrate.upgrade(dsn, buckets=4).after == first.after
    with Session(dsn) as s:
        assert s.fetch_one("layout_get")["bucket_count"] == 4


def test_operations_before_migrating_say_to_migrate(pg_server):
    import pytest

    from shardq import NotMigrated
    from shardq.client import Client

    admin = Dsn.parse(pg_server.url("postgres"))
    with Session(admin) as s:
        s.execute_raw("DROP DATABASE IF EXISTS mig_empty")
        s.execute_raw("CREATE DATABASE mig_empty")
    with Client(pg_server.url("mig_empty")) as client:
        with pytest.raises(NotMigrated, match="shardq migrate"):
            client.enqueue("q", b"x")


def test_the_tasks_table_leaves_room_on_each_page_for_claims_to_update_rows_in_place(pg_db):
    # A claim's update is HOT (writes no index entry) only while its row's page has room for the
    # new version; see migration 0004 for what 80 cost.
    rows = pg_db.sql("SELECT reloptions FROM pg_class WHERE relname = 'shardq_tasks'")
    assert "fillfactor=60" in rows[0]["reloptions"]
