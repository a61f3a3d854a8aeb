"""Structured Streaming into a queue: a file-source stream whose query fails mid-merge, restarts
from its checkpoint and takes more files, enqueuing every row exactly once."""

from __future__ import annotations

import json

import pytest

from shardq.errors import DatabaseError, InvalidInput, InvalidTaskFrame
from shardq.spark import TaskColumns, WriteOptions, await_stream, enqueue_stream, stream_run_id
from tests.support.spark import chunks_fail_after

pytestmark = pytest.mark.spark
pyspark = pytest.importorskip("pyspark")

OPTIONS = WriteOptions(partitions=1, chunks=4, merge_workers=1)


def _add_file(folder, name: str, payloads: list[str]) -> None:
    (folder / f"{name}.json").write_text("".join(json.dumps({"payload": p}) + "\n" for p in payloads))


def _stream(spark, folder):
    return spark.readStream.schema("payload string").option("maxFilesPerTrigger", 1).json(str(folder))


def test_a_stream_killed_mid_merge_and_restarted_enqueues_every_row_once(spark, pg_db, tmp_path):
    incoming, checkpoint = tmp_path / "in", str(tmp_path / "checkpoint")
    incoming.mkdir()
    expected = []
    for f in range(3):
        rows = [f"f{f}-r{r}" for r in range(40)] + [f"f{f}-same"] * 2  # identical rows are two tasks
        _add_file(incoming, f"part-{f}", rows)
        expected += rows
    batches = []
    # Batch 1's third chunk fails in its transaction (after two of its four chunks committed),
    # whichever writer runs it: the query stops with batch 1 half enqueued.
    with chunks_fail_after(pg_db, "stream-%-1", 2):
        query = enqueue_stream(
            _stream(spark, incoming),
            "events",
            checkpoint_location=checkpoint,
            dsn=pg_db.dsn,
            options=OPTIONS,
            trigger={"availableNow": True},
            on_batch=lambda batch, result: batches.append((batch, result.enqueued)),
        )
        query_id = str(query.id)
        with pytest.raises(DatabaseError, match="refused by the test"):
            await_stream(query)
    assert batches == [(0, 42)]
    assert 42 < pg_db.count() < 84  # the second batch is half written
    assert pg_db.count_spark_chunks(stream_run_id(query_id, 1)) == 2

    # Restart from the checkpoint: batch 1 is replayed (its merged chunks are skipped), then batch 2.
    query = enqueue_stream(
        _stream(spark, incoming),
        "events",
        checkpoint_location=checkpoint,
        dsn=pg_db.dsn,
        options=OPTIONS,
        trigger={"availableNow": True},
        on_batch=lambda batch, result: batches.append((batch, result.enqueued)),
    )
    assert str(query.id) == query_id
    await_stream(query)
    assert [b for b, _ in batches] == [0, 1, 2] and batches[2][1] == 42 and batches[1][1] < 42
    assert pg_db.count() == 126

    # More files arrive; a running query (default trigger) takes them as they come.
    query = enqueue_stream(
        _stream(spark, incoming), "events", checkpoint_location=checkpoint, dsn=pg_db.dsn, options=OPTIONS
    )
    try:
        for f in (3, 4):
            rows = [f"f{f}-r{r}" for r in range(30)]
            _add_file(incoming, f"part-{f}", rows)
            expected += rows
            query.processAllAvailable()
    finally:
        query.stop()
    payloads = sorted(bytes(r["payload"]).decode() for r in pg_db.tasks("payload"))
    assert payloads == sorted(expected)
    runs = pg_db.spark_run_ids()
    assert {stream_run_id(query_id, b) for b in range(3)} <= runs


def test_a_bad_row_in_a_stream_fails_the_query_with_the_row_count_and_enqueues_nothing(spark, pg_db, tmp_path):
    incoming = tmp_path / "in"
    incoming.mkdir()
    (incoming / "part-0.json").write_text('{"payload": "ok"}\n{"payload": null}\n{"payload": null}\n')
    query = enqueue_stream(
        _stream(spark, incoming),
        "events",
        checkpoint_location=str(tmp_path / "cp"),
        dsn=pg_db.dsn,
        options=OPTIONS,
        trigger={"availableNow": True},
    )
    with pytest.raises(InvalidTaskFrame, match=r"payload is NULL \(column 'payload'\): 2 of 3 rows"):
        await_stream(query)
    assert pg_db.count() == 0
    with pytest.raises(InvalidTaskFrame, match="payload column 'body' is not in the DataFrame"):
        enqueue_stream(
            _stream(spark, incoming),
            "events",
            checkpoint_location=str(tmp_path / "cp2"),
            dsn=pg_db.dsn,
            columns=TaskColumns(payload="body"),
        )
    with pytest.raises(InvalidInput, match="streaming DataFrame"):
        enqueue_stream(spark.range(1), "events", checkpoint_location=str(tmp_path / "cp3"), dsn=pg_db.dsn)


def test_cli_stream_reports_each_micro_batch_and_a_rerun_takes_only_new_files(spark, pg_db, tmp_path):
    from click.testing import CliRunner

    from shardq.arguments import encode_call
    from shardq.cli.main import cli

    incoming, checkpoint = tmp_path / "in", tmp_path / "cp"
    incoming.mkdir()
    for f in range(2):
        (incoming / f"part-{f}.json").write_text(
            "".join(json.dumps({"args": {"to": f"{f}-{r}@example.com", "n": r}}) + "\n" for r in range(5))
        )
    base = [
        "--dsn",
        pg_db.dsn.conninfo,
        "spark-enqueue",
        "mail",
        "--input",
        str(incoming),
        "--chunks",
        "2",
        "--partitions",
        "1",
    ]
    args = base + ["--stream", "--checkpoint", str(checkpoint), "--max-files-per-trigger", "1", "--task", "emails.send"]
    first = CliRunner().invoke(cli, args)
    assert first.exit_code == 0, first.output
    assert "batch 0: enqueued 5 into mail" in first.output and "batch 1: enqueued 5 into mail" in first.output
    (incoming / "part-2.json").write_text(json.dumps({"args": {"to": "late@example.com", "n": 9}}) + "\n")
    second = CliRunner().invoke(cli, args)
    assert second.exit_code == 0, second.output
    assert "batch 2: enqueued 1 into mail" in second.output and "batch 0" not in second.output
    assert pg_db.count() == 11
    payloads = {bytes(r["payload"]) for r in pg_db.tasks("payload")}
    assert encode_call("emails.send", {"n": 9, "to": "late@example.com"}) in payloads  # JSON reads sort fields

    for bad, message in [
        (base + ["--stream"], "--stream needs --checkpoint DIR"),
        (base + ["--checkpoint", str(checkpoint)], "--checkpoint applies to --stream only"),
        (base + ["--stream", "--checkpoint", str(checkpoint), "--run-id", "x"], "--run-id does not apply to --stream"),
        (
            [
                "--dsn",
                pg_db.dsn.conninfo,
                "spark-enqueue",
                "mail",
                "--input",
                str(incoming / "part-2.json"),
                "--stream",
                "--checkpoint",
                str(checkpoint),
            ],
            "is not one",
        ),
        (args[:-1] + ["nope.task", "--args-column", "missing"], "arguments column 'missing' is not in the DataFrame"),
    ]:
        result = CliRunner().invoke(cli, bad)
        assert result.exit_code == 2, (bad, result.output)
        assert message in result.output and len(result.output.strip().splitlines()) == 1, result.output
