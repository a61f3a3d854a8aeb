"""Spark rows as calls of app tasks (payloads byte for byte as encode_call writes them), and bad
input that fails the job before the merge with the column and the number of bad rows."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

import shardq
from shardq.arguments import encode_call
from shardq.errors import InvalidTaskFrame
from shardq.spark import TaskColumns, WriteOptions, enqueue_dataframe

pytestmark = pytest.mark.spark
pyspark = pytest.importorskip("pyspark")

SMALL = WriteOptions(partitions=2, chunks=4, merge_workers=2)
UTC = dt.UTC

# Strings that exercise every escaping rule of Python's json with ensure_ascii.
AWKWARD = ["plain", 'quote " and \\ backslash', "line\nfeed\ttab\r\b\f", "\x01\x1f\x7f", "é ß ü", "😀 emoji", ""]


def _struct_frame(spark):
    from pyspark.sql.types import (
        ArrayType,
        BooleanType,
        DateType,
        DecimalType,
        IntegerType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampNTZType,
        TimestampType,
    )

    args_type = StructType(
        [
            StructField("path", StringType()),
            StructField("width", IntegerType()),
            StructField("big", LongType()),
            StructField("sharp", BooleanType()),
            StructField("price", DecimalType(12, 8)),
            StructField("day", DateType()),
            StructField("when", TimestampType()),
            StructField("local", TimestampNTZType()),
            StructField("tags", ArrayType(StringType())),
            StructField("sizes", MapType(StringType(), IntegerType())),
            StructField("box", StructType([StructField("w", IntegerType()), StructField("note", StringType())])),
        ]
    )
    calls = []
    for i, text in enumerate(AWKWARD):
        calls.append(
            {
                "path": text,
                "width": i * 10 - 20,
                "big": 2**62 + i,
                "sharp": i % 2 == 0,
                "price": [Decimal("12.50000000"), Decimal("0.00000010"), Decimal("-3.00000000"), Decimal("0E-8")][
                    i % 4
                ],
                "day": dt.date(1999 + i, 1, 31),
                "when": [
                    dt.datetime(2026, 11, 25, 17, 4, 5, 123456, tzinfo=UTC),
                    dt.datetime(1969, 12, 31, 23, 59, 59, 500000, tzinfo=UTC),
                    dt.datetime(2030, 1, 1, tzinfo=UTC),
                ][i % 3],
                "local": dt.datetime(2026, 3, 29, 2, 30, i),
                "tags": [text, None, "x"] if i % 2 else [],
                "sizes": {text: i, "k": None},
                "box": None if i == 3 else {"w": i, "note": None},
            }
        )
    calls[2]["path"] = None
    df = spark.createDataFrame(
        [(f"row-{i}", call) for i, call in enumerate(calls)],
        StructType([StructField("name", StringType()), StructField("args", args_type)]),
    )
    return df, calls


def test_struct_arguments_become_encode_call_payloads_and_run_through_the_app(spark, pg_db):
    app = shardq.App(pg_db.dsn)
    seen = []

    @app.task(name="images.resize", queue="img", priority=-3)
    def resize(path, width, big, sharp, price, day, when, local, tags, sizes, box):
        seen.append(
            {
                "path": path,
                "width": width,
                "big": big,
                "sharp": sharp,
                "price": price,
                "day": day,
                "when": when,
                "local": local,
                "tags": tags,
                "sizes": sizes,
                "box": box,
            }
        )

    try:
        df, calls = _struct_frame(spark)
        result = enqueue_dataframe(df, "img", run_id="calls", dsn=pg_db.dsn, options=SMALL, task=resize)
        assert result.enqueued == len(calls)
        stored = sorted(bytes(r["payload"]) for r in pg_db.tasks("payload"))
        assert stored == sorted(encode_call("images.resize", call) for call in calls)
        assert {r["priority"] for r in pg_db.tasks("priority")} == {-3}
        counts = app.work(until_empty=True)
        assert counts.acked == len(calls) and counts.dead == 0
        key = repr
        assert sorted(map(key, seen)) == sorted(map(key, calls))
    finally:
        app.close()


def test_payloads_are_built_without_a_database_byte_for_byte_as_encode_call(spark):
    """The builder alone: escapes Python writes in short form (\\b, \\f, \\t), a literal
    backslash-u, the smallest long, NULL fields, nested NULL structs, empty arrays."""
    from shardq.spark import calls as calls_module

    texts = AWKWARD + ["back\\u0041slash-u", "tab\tonly", "\x08\x0c", "ok/slash", "<>&'"]
    calls = [
        {
            "s": text,
            "n": -(2**63) + i,
            "ok": i % 2 == 0,
            "xs": [text, None] if i % 3 else [],
            "inner": None if i % 4 == 0 else {"t": text, "m": None},
            "nothing": None,
        }
        for i, text in enumerate(texts)
    ]
    schema = "args struct<s: string, n: long, ok: boolean, xs: array<string>, inner: struct<t: string, m: int>, nothing: string>"
    df = spark.createDataFrame([(call,) for call in calls], schema)
    built, _, _, _ = calls_module.with_call_payload(df, "plain.task", "args", TaskColumns())
    got = [bytes(r[0]) for r in built.select(calls_module.CALL_PAYLOAD).collect()]
    assert got == [encode_call("plain.task", call) for call in calls]


def test_json_text_arguments_and_task_names_run_like_deferred_calls(spark, pg_db):
    app = shardq.App(pg_db.dsn)
    seen = []

    @app.task(name="emails.send", queue="emails")
    def send(to, n=0):
        seen.append((to, n))

    try:
        df = spark.createDataFrame([('{"to":"a@example.com","n":1}',), ('  {"to": "b@example.com"} ',)], "args string")
        enqueue_dataframe(df, "emails", run_id="json", dsn=pg_db.dsn, options=SMALL, task="emails.send")
        payloads = sorted(bytes(r["payload"]) for r in pg_db.tasks("payload"))
        assert encode_call("emails.send", {"to": "a@example.com", "n": 1}) in payloads
        assert app.work(until_empty=True).acked == 2
        assert sorted(seen) == [("a@example.com", 1), ("b@example.com", 0)]
    finally:
        app.close()


def test_arguments_that_cannot_be_a_call_are_refused_before_the_job(spark, pg_db):
    app = shardq.App(pg_db.dsn)

    @app.task(name="t")
    def t(a: int) -> None: ...

    floats = spark.createDataFrame([({"a": 1.5},)], "args struct<a: double>")
    with pytest.raises(InvalidTaskFrame, match=r"argument args\.a is double.*cast it to decimal"):
        enqueue_dataframe(floats, "q", run_id="f", dsn=pg_db.dsn, task="t")
    binary = spark.createDataFrame([({"a": b"x"},)], "args struct<a: binary>")
    with pytest.raises(InvalidTaskFrame, match=r"argument args\.a has type binary"):
        enqueue_dataframe(binary, "q", run_id="b", dsn=pg_db.dsn, task="t")
    wrong = spark.createDataFrame([({"b": 1},)], "args struct<b: int>")
    with pytest.raises(InvalidTaskFrame, match=r"arguments do not fit t: .*'a'"):
        enqueue_dataframe(wrong, "q", run_id="w", dsn=pg_db.dsn, task=t)
    with pytest.raises(InvalidTaskFrame, match=r"arguments column 'args' is not in the DataFrame \(columns: b\)"):
        enqueue_dataframe(spark.createDataFrame([(1,)], "b int"), "q", run_id="m", dsn=pg_db.dsn, task="t")
    with pytest.raises(InvalidTaskFrame, match="arguments column 'args' has type integer"):
        enqueue_dataframe(spark.createDataFrame([(1,)], "args int"), "q", run_id="i", dsn=pg_db.dsn, task="t")
    with pytest.raises(InvalidTaskFrame, match="either a payload column or a task"):
        enqueue_dataframe(floats, "q", run_id="p", dsn=pg_db.dsn, task="t", columns=TaskColumns(payload="x"))
    assert pg_db.count() == 0
    app.close()


def _staging_tables(db) -> int:
    return db.count_tables_like("shardq_stage_%")


@pytest.mark.parametrize(
    ("rows", "schema", "kwargs", "message"),
    [
        ([(None,)] * 2 + [("ok",)] * 48, "payload string", {}, r"payload is NULL \(column 'payload'\): 2 of 50 rows"),
        (
            [("x" * 2000,)] * 3 + [("ok",)] * 7,
            "payload string",
            {},
            r"payload longer than 1000 bytes \(column 'payload'\): 3 of 10 rows",
        ),
        (
            [("p", 2**40)] * 4 + [("p", 3)],
            "payload string, tries long",
            {"columns": TaskColumns(max_attempts="tries")},
            r"max_attempts above 10000 \(column 'tries'\): 4 of 5 rows",
        ),
        (
            [("p", "10"), ("p", "soon"), ("p", "later"), ("p", None)],
            "payload string, d string",
            {"columns": TaskColumns(delay="d")},
            r"delay is not a number \(column 'd'\): 2 of 4 rows",
        ),
        (
            [(None,), ('{"a": 1}',), ("[1]",), ("nope",)],
            "args string",
            {"task": "t"},
            r"arguments are NULL \(column 'args'\): 1 of 4 rows; arguments are not a JSON object \(column 'args'\): 2 of 4 rows",
        ),
        (
            [({"a": "y" * 2000},), ({"a": "ok"},)],
            "args struct<a: string>",
            {"task": "t"},
            r"payload longer than 1000 bytes \(column 'args' as a call of t\): 1 of 2 rows",
        ),
        (
            [({"a": {"$shardq": 1}},), ({"a": {"k": 1}},)],
            "args struct<a: map<string,int>>",
            {"task": "t"},
            r"arguments hold the map key '\$shardq', which is shardq's own \(column 'args'\): 1 of 2 rows",
        ),
    ],
)
def test_bad_values_fail_before_the_merge_naming_the_column_and_the_bad_rows(
    spark, pg_db, monkeypatch, rows, schema, kwargs, message
):
    monkeypatch.setattr("shardq.validation.PAYLOAD_MAX_BYTES", 1000)  # small rows, same checks
    df = spark.createDataFrame(rows, schema)
    with pytest.raises(InvalidTaskFrame, match=message):
        enqueue_dataframe(df, "bad", run_id="bad", dsn=pg_db.dsn, options=SMALL, **kwargs)
    assert pg_db.count() == 0 and _staging_tables(pg_db) == 0
    # No chunk written (the run's registration, with its chunking row -1, stays for the re-run).
    assert pg_db.count_spark_chunks() == 0


def test_string_columns_of_csv_inputs_are_parsed_into_due_times_and_priorities(spark, pg_db):
    rows = [("a", "2031-01-02T03:04:05Z", "-5", "3"), ("b", None, None, None)]
    df = spark.createDataFrame(rows, "payload string, at string, prio string, tries string")
    columns = TaskColumns(run_at="at", priority="prio", max_attempts="tries")
    assert enqueue_dataframe(df, "parsed", run_id="parsed", dsn=pg_db.dsn, columns=columns, options=SMALL).enqueued == 2
    got = {bytes(r["payload"]): r for r in pg_db.tasks("payload", "exec_time", "priority", "max_attempts", "state")}
    assert (got[b"a"]["exec_time"], got[b"a"]["priority"], got[b"a"]["max_attempts"]) == (
        dt.datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC),
        -5,
        3,
    )
    assert (got[b"b"]["state"], got[b"b"]["priority"], got[b"b"]["max_attempts"]) == ("ready", 0, 25)
