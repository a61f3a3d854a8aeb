"""The engine seam: detection, startup options, version checks, and that only the engine package
knows which database it talks to. No database needed except for the CLI's refusal."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from shardq.db import Dsn
from shardq.engine import COCKROACHDB, ENGINES, POSTGRESQL, engine_for_server, engine_for_sqlalchemy
from shardq.engine.cockroachdb import MIN_VERSION, bucket_count_of, parse_version
from shardq.errors import InvalidInput, UnsupportedServer

SRC = Path(__file__).resolve().parents[1] / "src" / "shardq"


def reported(**parameters: str):
    return lambda name: parameters.get(name)


def test_a_server_reporting_crdb_version_is_cockroachdb_and_any_other_is_postgresql():
    assert engine_for_server(reported(crdb_version="CockroachDB CCL v24.1.1 (x86_64)")) is COCKROACHDB
    assert engine_for_server(reported(server_version="18.1")) is POSTGRESQL


def test_a_cockroachdb_url_names_the_engine_and_a_postgresql_url_leaves_it_to_the_server():
    assert Dsn.parse("cockroachdb://root@h:26257/d").named_engine is COCKROACHDB
    assert Dsn.parse("cockroachdb+psycopg://root@h:26257/d").named_engine is COCKROACHDB
    assert Dsn.parse("postgresql://u@h/d").named_engine is None
    with pytest.raises(InvalidInput):
        Dsn.parse("mysql://u@h/d")


def test_cockroachdb_older_than_the_minimum_is_refused_naming_both_versions():
    with pytest.raises(UnsupportedServer) as refused:
        COCKROACHDB.check_version(reported(crdb_version="CockroachDB CCL v22.2.19 (x86_64-pc-linux-gnu)"))
    assert "v22.2.19" in str(refused.value) and f"v{MIN_VERSION[0]}.{MIN_VERSION[1]}" in str(refused.value)
    assert isinstance(refused.value, InvalidInput)  # the CLI's exit 2
    for fine in ("CockroachDB CCL v23.1.0 (x)", "CockroachDB OSS v24.1.1 (x)", "CockroachDB CCL v26.1.0-beta.1 (x)"):
        COCKROACHDB.check_version(reported(crdb_version=fine))


def test_postgresql_older_than_14_is_refused():
    with pytest.raises(UnsupportedServer, match=r"13\.4"):
        POSTGRESQL.check_version(reported(server_version="13.4 (Debian 13.4-1)"))
    POSTGRESQL.check_version(reported(server_version="18.1"))


def test_versions_are_read_from_what_cockroachdb_reports():
    assert parse_version("CockroachDB CCL v24.1.1 (x86_64-pc-linux-gnu, built 2024/06/10)") == (24, 1, 1)
    assert parse_version("CockroachDB CCL v23.2 (x)") == (23, 2, 0)
    assert parse_version(None) is None


def test_cockroachdb_connections_send_no_read_only_variable_and_internals_only_when_asked():
    plain = COCKROACHDB.startup_options(statement_timeout_ms=1500)
    assert plain == ["-c timezone=UTC", "-c statement_timeout=1500"]
    assert "-c allow_unsafe_internals=on" in COCKROACHDB.startup_options(internals=True)
    assert not any("results_buffer_size" in o for e in ENGINES for o in e.startup_options(internals=True))


def test_the_bucket_count_is_read_from_the_hash_sharded_index_definition():
    definition = ("CREATE UNIQUE INDEX shardq_tasks_pkey ON defaultdb.public.shardq_tasks USING btree "
                  "(state ASC, queue ASC, rank ASC, exec_time ASC, id ASC) USING HASH WITH (bucket_count=16)")
    assert bucket_count_of(definition) == 16
    assert bucket_count_of("CREATE UNIQUE INDEX shardq_tasks_id ON t USING btree (id ASC)") is None


def test_layout_discovery_reads_only_catalogs_outside_the_unsafe_internals_gate():
    # From 26.1 crdb_internal is refused without allow_unsafe_internals, and a nested
    # [SHOW INDEX] delegate reads crdb_internal.table_indexes (audit N4); workers discover the
    # layout every few seconds on sessions that do not opt in.
    text = COCKROACHDB.statements()["shard_layout_get"].text
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    assert "information_schema.statistics" in body and "pg_catalog.pg_indexes" in body
    assert "crdb_internal" not in body and "[SHOW" not in body.upper()
    assert "shard_layout_get" not in COCKROACHDB.statements_needing_internals


def test_every_engine_is_reachable_from_its_sqlalchemy_dialect():
    for engine in ENGINES:
        assert engine_for_sqlalchemy(engine.sqlalchemy_dialect) is engine


def test_only_the_engine_package_knows_which_database_it_talks_to():
    compares = re.compile(r"""(==|!=|\bin\b)\s*\(?\s*["'](postgresql|cockroachdb)["']|["'](postgresql|cockroachdb)["']\s*(==|!=)""")
    offenders = []
    for path in SRC.rglob("*.py"):
        if "engine" in path.relative_to(SRC).parts:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if compares.search(line) or ".dialect ==" in line or ".dialect !=" in line:
                offenders.append(f"{path.relative_to(SRC)}:{number}: {line.strip()}")
    assert not offenders


def test_the_cli_refuses_an_unsupported_server_with_one_line_and_exit_2(pg_db):
    # The embedded PostgreSQL made "too old" by raising the minimum in the CLI's own process.
    script = ("import sys, shardq.engine.postgresql as p; p.MIN_SERVER_VERSION = 99;"
              "from shardq.cli.main import main; sys.argv = ['shardq', 'stats']; main()")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "SHARDQ_DSN": pg_db.dsn.conninfo})
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "older than 99, the oldest shardq supports" in lines[0]
