"""The CockroachDB test databases' addresses and a session's first contact, against the recorded
CockroachDB (tests/support/recorded_cockroach.py): what a node says at connect is what
``statusReportParams`` (pkg/sql/pgwire/conn.go) reports, so the engine is recognised, its startup
options reach the server and explicit transactions are pinned to SERIALIZABLE."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from shardq.engine import COCKROACHDB
from shardq.errors import SerializationConflict, UnsupportedServer
from shardq.sessions.dsn import Dsn
from shardq.sessions.session import Session
from tests.support.cockroach import database_dsn
from tests.support.recorded_cockroach import CRDB_VERSION_22_2, Error, RecordedCockroach, Rows

pytestmark = pytest.mark.recorded

#: The 40001 every CockroachDB retry error carries; the text as logic tests record it
#: (pkg/sql/logictest/testdata/logic_test/txn: "restart transaction: TransactionRetryWithProtoRefreshError").
RETRY_ERROR = Error("40001", "restart transaction: TransactionRetryWithProtoRefreshError: WriteTooOldError")


def test_a_test_database_address_keeps_the_engine_and_reaches_the_database_named():
    with RecordedCockroach(lambda received: Rows([("one", "INT8")], [(1,)])) as server:
        root = Dsn.parse(server.url())
        dsn = database_dsn(root, "t_fresh")
        assert dsn.named_engine is COCKROACHDB
        with Session(dsn) as session:
            assert session.execute_raw("SELECT 1 AS one") == [{"one": 1}]
            assert session.engine is COCKROACHDB
        (startup,) = server.startups
        assert startup.parameters["database"] == "t_fresh"
        assert "-c timezone=UTC" in startup.parameters["options"]


def test_an_engine_name_where_the_engine_belongs_is_what_the_fixture_once_built():
    # The construction audit N10 found: it fails at the first connect, before any statement.
    with RecordedCockroach() as server:
        dsn = database_dsn(Dsn.parse(server.url()), "t_x")
        broken = dataclasses.replace(dsn, named_engine="cockroachdb")  # type: ignore[arg-type]  # the N10 bug, on purpose
        with pytest.raises(AttributeError, match="startup_options"):
            Session(broken).execute_raw("SELECT 1")


def test_a_postgresql_url_reaching_cockroachdb_learns_the_engine_from_crdb_version():
    with RecordedCockroach(lambda received: Rows([("one", "INT8")], [(1,)])) as server:
        with Session(Dsn.parse(server.url(scheme="postgresql"))) as session:
            session.execute_raw("SELECT 1 AS one")
            assert session.engine is COCKROACHDB
            assert session.sibling().engine is COCKROACHDB
        # Both engines ask for the same startup options, so the first connection is kept.
        assert all("-c timezone=UTC" in s.parameters["options"] for s in server.startups)


def test_a_node_older_than_supported_is_refused_in_one_line():
    with RecordedCockroach(crdb_version=CRDB_VERSION_22_2) as server:
        with Session(Dsn.parse(server.url())) as session, pytest.raises(UnsupportedServer, match=r"v22\.2\.19"):
            session.execute_raw("SELECT 1")


def test_an_explicit_transaction_is_serializable_and_retried_whole_after_a_40001():
    attempts = {"n": 0}

    def answer(received):
        if received.text.strip() == "SELECT 1 AS one":
            attempts["n"] += 1
            return RETRY_ERROR if attempts["n"] == 1 else Rows([("one", "INT8")], [(1,)])
        return None

    with RecordedCockroach(answer) as server:
        with Session(Dsn.parse(server.url())) as session:
            assert session.transaction(lambda s: s.execute_raw("SELECT 1 AS one")) == [{"one": 1}]
        sent = server.names_received()
        assert sent.count("BEGIN ISOLATION LEVEL SERIALIZABLE") == 2 and sent[-1] == "COMMIT"
        assert "ROLLBACK" in sent


def test_a_statement_retried_past_its_budget_is_a_serialization_conflict():
    with RecordedCockroach(lambda received: RETRY_ERROR if received.name == "task_ack_many" else None) as server:
        with Session(Dsn.parse(server.url()), max_retries=2) as session:
            session.set_shard_column("crdb_internal_exec_time_id_queue_rank_state_shard_4")
            with pytest.raises(SerializationConflict, match="restart transaction"):
                session.fetch_all(
                    "task_ack_many",
                    {
                        "ids": [uuid.uuid4()],
                        "tokens": [uuid.uuid4()],
                        "states": ["leased"],
                        "queues": ["q"],
                        "ranks": [0],
                        "exec_times": [None],
                    },
                    binary=True,
                    tuples=True,
                )
        assert server.names_received().count("task_ack_many") == 3
