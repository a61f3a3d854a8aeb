"""The CockroachDB engine (shardq.engine.cockroachdb) against what CockroachDB says: the server's
startup parameters through a real session, and EXPLAIN text recorded in CockroachDB's testdata
(tests/support/cockroach_answers.py names each source)."""

from __future__ import annotations

import pytest

from shardq.engine import COCKROACHDB, POSTGRESQL
from shardq.engine.cockroachdb import MIN_VERSION, parse_version
from shardq.errors import UnsupportedServer
from shardq.sessions.dsn import Dsn
from shardq.sessions.session import Session
from tests.support.cockroach_answers import (
    EXPLAIN_POINT_FOR_UPDATE,
    EXPLAIN_SKIP_LOCKED_FULL_SCAN,
    EXPLAIN_SKIP_LOCKED_HARD_LIMIT,
    EXPLAIN_SKIP_LOCKED_LIMIT_ABOVE,
    EXPLAIN_SKIP_LOCKED_POINT,
    explain_spans,
)
from tests.support.recorded_cockroach import (
    CRDB_VERSION_22_2,
    CRDB_VERSION_23_1,
    CRDB_VERSION_24_3,
    RecordedCockroach,
    Rows,
)

pytestmark = pytest.mark.recorded


def test_the_version_is_read_from_crdb_version_and_a_missing_one_is_none():
    assert parse_version(CRDB_VERSION_24_3) == (24, 3, 1)
    assert parse_version(CRDB_VERSION_23_1) == (23, 1, 30)
    assert parse_version("CockroachDB CCL v25.4 (x86_64-pc-linux-gnu)") == (25, 4, 0)
    assert parse_version(None) is None
    assert parse_version("PostgreSQL 16.2") is None


def test_a_server_reporting_crdb_version_is_recognised_as_cockroachdb():
    params = {"crdb_version": CRDB_VERSION_24_3}
    assert COCKROACHDB.recognises(params.get)
    nothing: dict[str, str] = {}
    assert not COCKROACHDB.recognises(nothing.get)
    assert not COCKROACHDB.recognises({"crdb_version": ""}.get)


def test_a_postgresql_url_reaching_cockroachdb_learns_the_engine_and_reopens_with_its_options():
    # Only an internals session's options differ between the engines (allow_unsafe_internals).
    with RecordedCockroach() as server:
        with Session(Dsn.parse(server.url(scheme="postgresql")), internals=True) as session:
            assert session.engine is COCKROACHDB
            assert session.dialect == "cockroachdb"
            assert session.parameter_status("crdb_version") == CRDB_VERSION_24_3
            assert session.server_version == 130000
        # First the PostgreSQL options (assumed from the URL), then one reopen with CockroachDB's.
        options = [s.parameters.get("options", "") for s in server.startups]
        assert options == [
            " ".join(POSTGRESQL.startup_options(internals=True)),
            "-c timezone=UTC -c allow_unsafe_internals=on",
        ]


def test_a_postgresql_url_reaching_cockroachdb_keeps_its_connection_when_the_options_agree():
    with RecordedCockroach() as server:
        with Session(Dsn.parse(server.url(scheme="postgresql")), statement_timeout_ms=2500) as session:
            assert session.engine is COCKROACHDB
        assert [s.parameters.get("options") for s in server.startups] == ["-c timezone=UTC -c statement_timeout=2500"]


def test_a_cockroachdb_url_connects_once_with_timezone_only_by_default():
    with RecordedCockroach() as server:
        with Session(Dsn.parse(server.url())) as session:
            assert session.engine is COCKROACHDB
            session.parameter_status("crdb_version")
        assert [s.parameters.get("options") for s in server.startups] == ["-c timezone=UTC"]


def test_the_dsn_options_come_first_and_the_engines_after_them():
    with RecordedCockroach() as server:
        url = server.url() + "&options=-c%20application_name%3Dx"
        with Session(Dsn.parse(url), statement_timeout_ms=7) as session:
            session.parameter_status("crdb_version")
        assert (
            server.startups[0].parameters["options"] == "-c application_name=x -c timezone=UTC -c statement_timeout=7"
        )


def test_an_internals_session_sends_allow_unsafe_internals():
    assert COCKROACHDB.startup_options(internals=True) == ["-c timezone=UTC", "-c allow_unsafe_internals=on"]
    with RecordedCockroach() as server:
        with Session(Dsn.parse(server.url()), internals=True) as session:
            session.parameter_status("crdb_version")
        assert server.startups[0].parameters["options"] == "-c timezone=UTC -c allow_unsafe_internals=on"


def test_a_server_older_than_23_1_is_refused_and_its_connection_closed():
    assert MIN_VERSION == (23, 1)
    with RecordedCockroach(crdb_version=CRDB_VERSION_22_2) as server:
        session = Session(Dsn.parse(server.url()))
        with pytest.raises(UnsupportedServer, match=r"CockroachDB v22\.2\.19 is older than v23\.1"):
            session.parameter_status("crdb_version")
        assert session._conn is None
        assert session._engine is COCKROACHDB  # named by the URL; nothing was learnt


def test_the_oldest_supported_line_is_accepted():
    with RecordedCockroach(crdb_version=CRDB_VERSION_23_1) as server:
        with Session(Dsn.parse(server.url())) as session:
            assert session.parameter_status("crdb_version") == CRDB_VERSION_23_1


def test_a_server_reporting_a_version_it_cannot_parse_is_not_refused():
    COCKROACHDB.check_version({"crdb_version": "CockroachDB CCL (development build)"}.get)


def test_explain_is_sent_with_the_values_inlined():
    inline = lambda text, params: text.replace("%(queue)s", repr(params["queue"]))  # noqa: E731
    text, values = COCKROACHDB.explain_query("SELECT 1 FROM t WHERE q = %(queue)s", {"queue": "q"}, inline)
    assert text == "EXPLAIN SELECT 1 FROM t WHERE q = 'q'"
    assert values is None


def test_a_full_scan_is_read_from_explain():
    assert COCKROACHDB.explain_reads_whole_table(EXPLAIN_SKIP_LOCKED_FULL_SCAN)
    assert not COCKROACHDB.explain_reads_whole_table(EXPLAIN_SKIP_LOCKED_POINT)


def test_a_skip_locked_scan_without_a_pushed_down_limit_is_unbounded():
    assert COCKROACHDB.explain_skip_locked_unbounded(EXPLAIN_SKIP_LOCKED_FULL_SCAN)
    assert COCKROACHDB.explain_skip_locked_unbounded(EXPLAIN_SKIP_LOCKED_POINT)
    # A limit operator above the locking scan does not bound what the scan locks.
    assert COCKROACHDB.explain_skip_locked_unbounded(EXPLAIN_SKIP_LOCKED_LIMIT_ABOVE)


def test_a_skip_locked_scan_with_a_hard_limit_or_a_scan_without_skip_locked_is_not_flagged():
    assert not COCKROACHDB.explain_skip_locked_unbounded(EXPLAIN_SKIP_LOCKED_HARD_LIMIT)
    assert not COCKROACHDB.explain_skip_locked_unbounded(EXPLAIN_POINT_FOR_UPDATE)


def test_spans_over_every_bucket_count_as_fanning_out_including_the_more_count():
    sixteen = [f"[/{b}/'ready' - /{b}/'ready']" for b in range(16)]
    assert COCKROACHDB.explain_fans_out(explain_spans(sixteen), 16)
    assert not COCKROACHDB.explain_fans_out(explain_spans(sixteen[:15]), 16)
    assert not COCKROACHDB.explain_fans_out(explain_spans(sixteen[:3]), 16)
    # One bucket: nothing to fan out over.
    assert not COCKROACHDB.explain_fans_out(explain_spans(sixteen[:1]), 1)


def test_a_lookup_naming_the_shard_column_with_an_in_list_fans_out():
    # pkg/sql/opt/exec/execbuilder/testdata/hash_sharded_index records the bucket check of an
    # insert as "render 0       column5 IN (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)"; adapted: the shard
    # column named, as a constraint over every bucket names it.
    plan = (
        EXPLAIN_POINT_FOR_UPDATE
        + "\n  render 0: crdb_internal_exec_time_id_queue_rank_state_shard_16 IN (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)"
    )
    assert COCKROACHDB.explain_fans_out(plan, 16)


def test_a_plan_is_run_on_the_recorded_server_through_the_engine():
    # The session serves the engine request of a plan (shardq.sessions.session._serve's fallthrough).
    from shardq.sql.plan import ENGINE

    def plan():
        engine = yield ENGINE
        return engine

    with RecordedCockroach(lambda r: Rows([("x", "INT8")], [(1,)])) as server:
        with Session(Dsn.parse(server.url())) as session:
            assert session.run(plan()) is COCKROACHDB
