"""The session rules on CockroachDB (shardq.sessions.rules, shardq.sessions.session, shardq.sessions.session_async,
shardq.sessions.borrowed) against the recorded server: the pinned SERIALIZABLE
isolation, the 40001 retry of one statement and of a whole transaction, the 40003 resend of
fenced statements only, 42703 on the shard column, and message redaction, sync and asyncio alike.
Errors: tests/support/cockroach_answers.py."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import psycopg
import pytest

import shardq.sessions.session
import shardq.sessions.session_async
from shardq.engine import COCKROACHDB
from shardq.errors import AmbiguousResult, NotMigrated, SerializationConflict, ShardLayoutChanged, StatementTimeout
from shardq.models import TaskKey
from shardq.models.leases import Fenced
from shardq.sessions.borrowed import borrow, borrow_async
from shardq.sessions.dsn import Dsn
from shardq.sessions.session import Session
from shardq.sessions.session_async import AsyncSession
from tests.support.cockroach_answers import (
    AMBIGUOUS_40003,
    NOW,
    RETRY_40001,
    SHARD_COLUMN_16,
    STATEMENT_TIMEOUT_57014,
    undefined_column,
)
from tests.support.recorded_cockroach import (
    Answer,
    Answering,
    Command,
    Error,
    Received,
    RecordedCockroach,
    Rows,
    recorded_cockroach,
)

pytestmark = pytest.mark.recorded

IDS = Rows([("id", "UUID")], [(uuid.UUID(int=1),)], tag="DELETE 1")
QUEUE_ROW = Rows([("name", "TEXT")], [])


@pytest.fixture(autouse=True)
def no_pauses(monkeypatch):
    """Retries pause 0 s (the backoff itself is covered by test_retry.py)."""
    monkeypatch.setattr(shardq.sessions.session, "retry_pause", lambda *a, **k: 0.0)
    monkeypatch.setattr(shardq.sessions.session_async, "retry_pause", lambda *a, **k: 0.0)


def _failing(times: int, error: Error, then: Answer) -> Callable[[Received], Answer]:
    """An answer that fails ``times`` times with ``error``, then answers ``then``."""
    left = {"n": times}

    def answer(received: Received) -> Answer:
        if left["n"] > 0:
            left["n"] -= 1
            return error
        return then

    return answer


def _items() -> list[Fenced]:
    return [Fenced(TaskKey(1, "q", 0, NOW, uuid.UUID(int=1)), uuid.uuid4())]


def _session(server: RecordedCockroach, **options) -> Session:
    session = Session(Dsn.parse(server.url()), **options)
    session.set_shard_column(SHARD_COLUMN_16)
    return session


# -- isolation -------------------------------------------------------------------------------------


def test_every_transaction_begins_at_serializable():
    with recorded_cockroach({"queue_list": QUEUE_ROW}) as server, _session(server) as session:
        session.transaction(lambda s: s.fetch_all("queue_list"))
    assert server.names_received() == ["BEGIN ISOLATION LEVEL SERIALIZABLE", "queue_list", "COMMIT"]


def test_every_asyncio_transaction_begins_at_serializable():
    async def main(url):
        session = AsyncSession(Dsn.parse(url))
        try:
            await session.transaction(lambda s: s.fetch_all("queue_list"))
        finally:
            await session.close()

    with recorded_cockroach({"queue_list": QUEUE_ROW}) as server:
        asyncio.run(main(server.url()))
    assert server.names_received() == ["BEGIN ISOLATION LEVEL SERIALIZABLE", "queue_list", "COMMIT"]


# -- timeouts ------------------------------------------------------------------------------------


def test_a_statement_timeout_is_reported_once_and_never_resent():
    with recorded_cockroach({"task_ack_many": STATEMENT_TIMEOUT_57014}) as server, _session(server) as session:
        with pytest.raises(StatementTimeout, match="due to statement timeout"):
            session.run(COCKROACHDB.ack_keys(_items()))
    assert server.names_received() == ["task_ack_many"]


# -- 40001 -----------------------------------------------------------------------------------------


def test_a_40001_outside_a_transaction_resends_the_statement_alone():
    with recorded_cockroach({"task_ack_many": _failing(2, RETRY_40001, IDS)}) as server, _session(server) as session:
        assert session.run(COCKROACHDB.ack_keys(_items())) == {uuid.UUID(int=1)}
    assert server.names_received() == ["task_ack_many"] * 3


def test_a_40001_past_the_retry_budget_is_a_serialization_conflict():
    with recorded_cockroach({"task_ack_many": RETRY_40001}) as server, _session(server, max_retries=2) as session:
        with pytest.raises(SerializationConflict, match="TransactionRetryWithProtoRefreshError"):
            session.run(COCKROACHDB.ack_keys(_items()))
    assert server.names_received() == ["task_ack_many"] * 3


def test_a_40001_inside_a_transaction_reruns_the_whole_body():
    runs = []

    def body(s: Session):
        runs.append(1)
        s.fetch_all("queue_list")
        return s.fetch_all(
            "task_ack_many",
            {"states": [], "buckets": [], "queues": [], "ranks": [], "exec_times": [], "ids": [], "tokens": []},
        )

    answers: dict[str, Answering] = {"queue_list": QUEUE_ROW, "task_ack_many": _failing(1, RETRY_40001, IDS)}
    with recorded_cockroach(answers) as server, _session(server) as session:
        assert session.transaction(body) == [{"id": uuid.UUID(int=1)}]
    assert len(runs) == 2
    assert server.names_received() == [
        "BEGIN ISOLATION LEVEL SERIALIZABLE",
        "queue_list",
        "task_ack_many",
        "ROLLBACK",
        "BEGIN ISOLATION LEVEL SERIALIZABLE",
        "queue_list",
        "task_ack_many",
        "COMMIT",
    ]


def test_a_40001_at_commit_reruns_the_whole_body():
    answers: dict[str, Answering] = {"queue_list": QUEUE_ROW, "COMMIT": _failing(1, RETRY_40001, Command("COMMIT"))}
    with recorded_cockroach(answers) as server, _session(server) as session:
        session.transaction(lambda s: s.fetch_all("queue_list"))
    assert server.names_received() == ["BEGIN ISOLATION LEVEL SERIALIZABLE", "queue_list", "COMMIT"] * 2


def test_a_transaction_past_the_retry_budget_is_a_serialization_conflict():
    answers = {"queue_list": RETRY_40001}
    with recorded_cockroach(answers) as server, _session(server, max_retries=1) as session:
        with pytest.raises(SerializationConflict):
            session.transaction(lambda s: s.fetch_all("queue_list"))
    assert server.names_received().count("queue_list") == 2


def test_an_asyncio_40001_is_retried_alone_and_in_a_transaction():
    async def main(url):
        session = AsyncSession(Dsn.parse(url))
        session.set_shard_column(SHARD_COLUMN_16)
        try:
            alone = await session.run(COCKROACHDB.ack_keys(_items()))
            whole = await session.transaction(lambda s: s.fetch_all("queue_list"))
            return alone, whole
        finally:
            await session.close()

    answers = {"task_ack_many": _failing(1, RETRY_40001, IDS), "queue_list": _failing(1, RETRY_40001, QUEUE_ROW)}
    with recorded_cockroach(answers) as server:
        alone, whole = asyncio.run(main(server.url()))
    assert alone == {uuid.UUID(int=1)} and whole == []
    assert server.names_received() == [
        "task_ack_many",
        "task_ack_many",
        "BEGIN ISOLATION LEVEL SERIALIZABLE",
        "queue_list",
        "ROLLBACK",
        "BEGIN ISOLATION LEVEL SERIALIZABLE",
        "queue_list",
        "COMMIT",
    ]


def test_an_asyncio_transaction_past_the_retry_budget_is_a_serialization_conflict():
    async def main(url):
        session = AsyncSession(Dsn.parse(url), max_retries=1)
        try:
            await session.transaction(lambda s: s.fetch_all("queue_list"))
        finally:
            await session.close()

    with recorded_cockroach({"queue_list": RETRY_40001}) as server:
        with pytest.raises(SerializationConflict):
            asyncio.run(main(server.url()))


# -- 40003 -----------------------------------------------------------------------------------------


def test_a_40003_resends_a_fenced_ack():
    with (
        recorded_cockroach({"task_ack_many": _failing(1, AMBIGUOUS_40003, IDS)}) as server,
        _session(server) as session,
    ):
        assert session.run(COCKROACHDB.ack_keys(_items())) == {uuid.UUID(int=1)}
    assert server.names_received() == ["task_ack_many"] * 2


def test_a_40003_of_a_claim_is_an_ambiguous_result_and_is_not_resent():
    with recorded_cockroach({"task_claim_batch": AMBIGUOUS_40003}) as server, _session(server) as session:
        with pytest.raises(AmbiguousResult, match="result is ambiguous"):
            session.run(COCKROACHDB.claim([0], "q", 10, 30.0))
    assert server.names_received() == ["task_claim_batch"]


def test_an_asyncio_40003_resends_only_fenced_statements():
    async def main(url):
        session = AsyncSession(Dsn.parse(url))
        session.set_shard_column(SHARD_COLUMN_16)
        try:
            done = await session.run(COCKROACHDB.ack_keys(_items()))
            with pytest.raises(AmbiguousResult):
                await session.run(COCKROACHDB.claim([0], "q", 10, 30.0))
            return done
        finally:
            await session.close()

    answers: dict[str, Answering] = {
        "task_ack_many": _failing(1, AMBIGUOUS_40003, IDS),
        "task_claim_batch": AMBIGUOUS_40003,
    }
    with recorded_cockroach(answers) as server:
        assert asyncio.run(main(server.url())) == {uuid.UUID(int=1)}
    assert server.names_received() == ["task_ack_many", "task_ack_many", "task_claim_batch"]


# -- 42703 -----------------------------------------------------------------------------------------


def test_a_missing_shard_column_is_a_layout_change():
    with recorded_cockroach({"task_claim_batch": undefined_column(SHARD_COLUMN_16)}) as server:
        with _session(server) as session, pytest.raises(ShardLayoutChanged, match="re-discover"):
            session.run(COCKROACHDB.claim([0], "q", 10, 30.0))


def test_another_missing_column_of_a_named_statement_is_not_migrated():
    with recorded_cockroach({"queue_list": undefined_column("keep_results")}) as server:
        with _session(server) as session, pytest.raises(NotMigrated, match='column "keep_results" does not exist'):
            session.fetch_all("queue_list")


def test_an_asyncio_missing_shard_column_is_a_layout_change():
    async def main(url):
        session = AsyncSession(Dsn.parse(url))
        session.set_shard_column(SHARD_COLUMN_16)
        try:
            await session.run(COCKROACHDB.claim([0], "q", 10, 30.0))
        finally:
            await session.close()

    with recorded_cockroach({"task_claim_batch": undefined_column(SHARD_COLUMN_16)}) as server:
        with pytest.raises(ShardLayoutChanged):
            asyncio.run(main(server.url()))


# -- redaction -------------------------------------------------------------------------------------


def test_the_password_never_appears_in_an_error_message():
    secret = "s3cr3t-pw"
    error = Error("XX000", f"internal error: connection to postgresql://root:{secret}@node failed")
    with recorded_cockroach({"queue_list": error}) as server:
        url = server.url().replace("root@", f"root:{secret}@")
        with Session(Dsn.parse(url)) as session, pytest.raises(shardq.errors.DatabaseError) as raised:
            session.fetch_all("queue_list")
    assert secret not in str(raised.value)
    assert "***" in str(raised.value)
    assert isinstance(raised.value.__cause__, psycopg.Error)


# -- statements outside the named path (db_special) ------------------------------------------------


def test_explain_on_cockroachdb_sends_the_statement_with_its_values_inlined():
    plan = Rows([("info", "TEXT")], [("distribution: local",), ("• scan",), ("  spans: FULL SCAN",)])
    with recorded_cockroach(lambda r: plan if r.text.startswith("EXPLAIN ") else None) as server:
        with _session(server) as session:
            text = session.explain("queue_get", {"queue": "emails"})
    assert text == "distribution: local\n• scan\n  spans: FULL SCAN"
    (received,) = server.received
    assert received.text.startswith("EXPLAIN SELECT name") and "'emails'" in received.text
    assert received.params == ()


def test_a_rolled_back_transaction_on_cockroachdb_begins_at_serializable_and_rolls_back():
    with recorded_cockroach({"queue_list": QUEUE_ROW}) as server, _session(server) as session:
        assert session.rolled_back(lambda s: s.fetch_all("queue_list")) == []
    assert server.names_received() == ["BEGIN ISOLATION LEVEL SERIALIZABLE", "queue_list", "ROLLBACK"]


def test_ddl_on_cockroachdb_fills_identifier_and_literal_slots():
    with recorded_cockroach(lambda r: Command("ALTER TABLE") if r.text.startswith("ALTER TABLE") else None) as server:
        with _session(server) as session:
            session.execute_ddl("table_primary_key_alter", literals={"bucket_count": 32})
            session.execute_ddl("shard_column_drop", identifiers={"column": SHARD_COLUMN_16})
    first, second = (r.text for r in server.received)
    assert first.endswith("USING HASH WITH (bucket_count = 32)")
    assert second == f'ALTER TABLE shardq_tasks DROP COLUMN "{SHARD_COLUMN_16}"'


# -- borrowed connections --------------------------------------------------------------------------


def test_a_borrowed_cockroachdb_connection_learns_the_engine_and_never_retries():
    with recorded_cockroach({"task_ack_many": RETRY_40001}) as server:
        with psycopg.connect(server.url().replace("cockroachdb://", "postgresql://"), autocommit=True) as conn:
            session = borrow(conn)
            assert session.engine is COCKROACHDB
            session.set_shard_column(SHARD_COLUMN_16)
            with pytest.raises(SerializationConflict):
                session.transaction(lambda s: s.run(COCKROACHDB.ack_keys(_items())))
            assert not conn.closed
    assert server.names_received().count("task_ack_many") == 1


def test_an_asyncio_borrowed_cockroachdb_connection_learns_the_engine():
    async def main(url):
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        try:
            session = await borrow_async(conn)
            assert session.engine is COCKROACHDB
            return await session.transaction(lambda s: s.fetch_all("queue_list"))
        finally:
            await conn.close()

    with recorded_cockroach({"queue_list": QUEUE_ROW}) as server:
        assert asyncio.run(main(server.url().replace("cockroachdb://", "postgresql://"))) == []
    assert server.names_received() == ["BEGIN", "queue_list", "COMMIT"]


# -- asyncio connect -------------------------------------------------------------------------------


def test_an_asyncio_session_learns_cockroachdb_from_a_postgresql_url():
    async def main(url):
        session = AsyncSession(Dsn.parse(url), statement_timeout_ms=900)
        try:
            await session.connection()
            return session.engine
        finally:
            await session.close()

    with RecordedCockroach() as server:
        assert asyncio.run(main(server.url(scheme="postgresql"))) is COCKROACHDB
    assert [s.parameters["options"] for s in server.startups] == ["-c timezone=UTC -c statement_timeout=900"]


def test_an_asyncio_session_refuses_a_server_older_than_23_1():
    from shardq.errors import UnsupportedServer
    from tests.support.recorded_cockroach import CRDB_VERSION_22_2

    async def main(url):
        session = AsyncSession(Dsn.parse(url))
        await session.connection()  # the URL named the engine: only a connection checks the version

    with RecordedCockroach(crdb_version=CRDB_VERSION_22_2) as server:
        with pytest.raises(UnsupportedServer, match=r"v22\.2\.19"):
            asyncio.run(main(server.url()))
