"""Bad-input fuzzing (hypothesis) of the Spark bulk enqueue: ``shardq spark-enqueue`` over random
CSV and JSON-lines files, column mappings, options and run ids.

Properties, for every generated input:
  * exit 0 with "enqueued N" (N at most the rows given, the tasks table grown by exactly N), or
    exit 2 with exactly one line on stderr, no traceback, and nothing written: the tasks table is
    unchanged and no staging table is left behind;
  * the options and formats the job checks before Spark starts raise InvalidInput, nothing else.

The Spark runs are long (one local Spark job per input), so they are in the full run only; the
option checks run in CI.
"""

from __future__ import annotations

import csv
import io
import json
import os

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardq import InvalidInput
from tests.reliability.fuzz_support import MODES, Tally, fuzz_settings

HEADERS = ["payload", "body", "key", "delay", "prio", "tries", "at", "weird col", "x'; DROP TABLE shardq_tasks; --"]
SPARK_EXAMPLES = int(os.environ.get("SHARDQ_FUZZ_SPARK_EXAMPLES", "30"))


@pytest.mark.parametrize("mode", MODES)
def test_spark_write_options_and_formats_raise_invalid_input_only(figures, mode):
    from shardq.spark import WriteOptions, input_format

    tally = Tally(figures, "library: Spark WriteOptions / input format")
    number = st.one_of(
        st.integers(-3, 2_000_000), st.floats(allow_nan=True), st.booleans(), st.text(max_size=3), st.none()
    )

    @fuzz_settings(mode)
    @given(
        partitions=number,
        batch=number,
        chunks=number,
        workers=number,
        ttl=number,
        path=st.text(max_size=20),
        fmt=st.one_of(st.none(), st.sampled_from(["csv", "json", "parquet"]), st.text(max_size=6)),
    )
    def check(partitions, batch, chunks, workers, ttl, path, fmt):
        try:
            WriteOptions(
                partitions=partitions, batch_size=batch, chunks=chunks, merge_workers=workers, stage_ttl_seconds=ttl
            ).validate()
            tally.ok()
        except InvalidInput:
            tally.no()
        try:
            assert input_format(path, fmt) in ("csv", "json", "parquet")
            tally.ok()
        except InvalidInput:
            tally.no()

    try:
        check()
    finally:
        tally.save()


cell = st.one_of(
    st.text(max_size=12),
    st.integers(-(2**63), 2**63),
    st.floats(allow_nan=True, allow_infinity=True),
    st.none(),
    st.sampled_from(
        [
            "",
            "-1",
            "0",
            "10001",
            "1e309",
            "2030-01-01T00:00:00Z",
            "not a time",
            '"',
            "a,b",
            "line\nbreak",
            "x" * 600,
            "'; DROP TABLE shardq_tasks; --",
        ]
    ),
)


@st.composite
def inputs(draw):
    fmt = draw(st.sampled_from(["csv", "json"]))
    header = draw(st.lists(st.sampled_from(HEADERS), min_size=1, max_size=5, unique=True))
    rows = draw(st.lists(st.lists(cell, min_size=len(header), max_size=len(header)), max_size=6))
    junk = draw(st.one_of(st.just(""), st.text(max_size=15)))  # a malformed trailing line
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(header)
        writer.writerows([["" if v is None else v for v in row] for row in rows])
        text = buffer.getvalue()
    else:
        text = "".join(json.dumps(dict(zip(header, row)), default=str) + "\n" for row in rows)
    column = st.one_of(st.none(), st.sampled_from(header + ["nope"]))
    mapping = {
        "--payload-column": draw(st.one_of(st.sampled_from(header + ["nope"]))),
        "--dedupe-column": draw(column),
        "--delay-column": draw(column),
        "--priority-column": draw(column),
        "--max-attempts-column": draw(column),
        "--run-at-column": draw(column),
    }
    # Mostly valid options and queue (so most inputs reach Spark), sometimes not.
    valid = draw(st.integers(0, 4)) > 0
    options = {
        "--partitions": draw(st.sampled_from(["1", "2"] if valid else ["0", "-1", "x", "300"])),
        "--batch-size": draw(st.sampled_from(["128", "256"] if valid else ["1000", "0"])),
        "--chunks": draw(st.sampled_from(["1", "4"] if valid else ["0", "70000"])),
        "--merge-workers": draw(st.sampled_from(["1", "2"] if valid else ["0"])),
        "--run-id": draw(st.one_of(st.none(), st.text(max_size=20), st.just("r'; DROP TABLE shardq_tasks; --"))),
    }
    queue = draw(st.just("sparkq") if valid else st.one_of(st.just("spark q"), st.text(max_size=6)))
    return fmt, text + junk, queue, mapping, options, len(rows)


@st.composite
def wellformed(draw):
    """Inputs a user would write: a text payload and, sometimes, a dedupe key, a delay and a
    priority column of the right types (values still drawn freely: empty, long, odd, NULL)."""
    fmt = draw(st.sampled_from(["csv", "json"]))
    n = draw(st.integers(1, 6))
    text = st.text(
        alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), min_size=1, max_size=30
    )
    columns = {"payload": draw(st.lists(text, min_size=n, max_size=n))}
    if draw(st.booleans()):
        columns["key"] = draw(st.lists(st.one_of(st.none(), text, st.just("x" * 600)), min_size=n, max_size=n))
    if draw(st.booleans()):
        columns["delay"] = draw(st.lists(st.one_of(st.none(), st.integers(-5, 10**6)), min_size=n, max_size=n))
    if draw(st.booleans()):
        columns["prio"] = draw(st.lists(st.integers(-(2**62), 2**62), min_size=n, max_size=n))
    names = list(columns)
    rows = [[columns[c][i] for c in names] for i in range(n)]
    if fmt == "csv":
        buffer = io.StringIO()
        csv.writer(buffer).writerows([names] + [["" if v is None else v for v in row] for row in rows])
        body = buffer.getvalue()
    else:
        body = "".join(json.dumps(dict(zip(names, row))) + "\n" for row in rows)
    mapping = {
        "--payload-column": "payload",
        "--dedupe-column": "key" if "key" in columns else None,
        "--delay-column": "delay" if "delay" in columns else None,
        "--priority-column": "prio" if "prio" in columns else None,
        "--max-attempts-column": None,
        "--run-at-column": None,
    }
    options = {
        "--partitions": "2",
        "--batch-size": "128",
        "--chunks": "4",
        "--merge-workers": "2",
        "--run-id": draw(st.one_of(st.none(), st.just("r'; DROP TABLE shardq_tasks; --"), st.uuids().map(str))),
    }
    return fmt, body, "sparkq", mapping, options, n


@pytest.mark.spark
@pytest.mark.slow
def test_spark_enqueue_of_random_csv_and_json_inputs_exits_0_or_2_and_writes_nothing_when_refused(
    spark, pg_db, tmp_path, figures
):
    from shardq.cli.main import cli

    tally = Tally(figures, "CLI: shardq spark-enqueue (random CSV/JSON inputs, column mappings, options, run ids)")
    files = iter(range(10**9))

    def state():
        tasks = pg_db.count()
        return tasks, pg_db.count_tables_like("shardq_stage_%")

    @settings(
        max_examples=SPARK_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(case=st.one_of(wellformed(), inputs()))
    def check(case):
        fmt, text, queue, mapping, options, rows = case
        path = tmp_path / f"input{next(files)}.{fmt}"
        path.write_text(text)
        args = ["--dsn", pg_db.dsn.conninfo, "spark-enqueue", queue, "--input", str(path)]
        for name, value in {**mapping, **options}.items():
            if value is not None:
                args += [name, value]
        before = state()
        result = CliRunner().invoke(cli, args, catch_exceptions=True)
        after = state()
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
        assert "Traceback" not in result.stdout + result.stderr
        assert result.exit_code in (0, 2), (result.exit_code, result.stdout, result.stderr)
        assert after[1] == 0, "a staging table was left behind"
        if result.exit_code == 0:
            tally.ok()
            enqueued = int(result.stdout.split("enqueued ", 1)[1].split()[0])
            assert enqueued <= rows + (1 if text.strip() else 0) and after[0] == before[0] + enqueued
            return
        tally.no()
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("shardq: "), result.stderr
        assert after == before, "a refused Spark enqueue wrote tasks"

    try:
        check()
    finally:
        tally.save(note="spark-enqueue: one local Spark job per input (full run only)")
    assert pg_db.count_tables_named("shardq_tasks") == 1
