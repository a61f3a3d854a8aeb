"""Spark ``then=``: the run's callback runs once after every task of the run succeeded, re-runs
included; a dead task cancels it (shardq.workflows.spark_callbacks, through the real Spark writers)."""

from __future__ import annotations

import pytest

import shardq
from shardq.app import AppTask
from shardq.errors import DatabaseError, InvalidInput
from shardq.spark import TaskColumns, WriteOptions, enqueue_dataframe
from tests.support.spark import chunks_fail_after

pytestmark = pytest.mark.spark
pyspark = pytest.importorskip("pyspark")


def _frame(spark, n: int):
    from pyspark.sql import functions as F

    return spark.range(n).select(
        F.to_json(F.struct(F.col("id").alias("n"))).alias("args"),
        F.concat(F.lit("k"), F.col("id").cast("string")).alias("key"),
    )


class _RowsApp(shardq.App):
    """The app of these tests, its two tasks at hand."""

    item: AppTask[[int], None]
    done: AppTask[[], None]


def _app(pg_db, ran: list, *, fail: int | None = None) -> _RowsApp:
    app = _RowsApp(pg_db.dsn)

    @app.task(name="item", queue="rows", max_attempts=1)
    def item(n: int) -> None:
        if n == fail:
            raise ValueError(f"row {n} is bad")
        ran.append(n)

    @app.task(name="done", queue="rows")
    def done() -> None:
        ran.append("done")

    app.item, app.done = item, done
    return app


def _callback_tasks(pg_db) -> int:
    return pg_db.count_tasks(payload=shardq.arguments.encode_call("done", {}))


@pytest.mark.parametrize(
    "writer,columns",
    [
        ("copy", TaskColumns()),  # plain rows: binary COPY straight into the tasks table
        ("copy", TaskColumns(dedupe_key="key")),  # through the TEMP table and the merge statement
        ("jdbc", TaskColumns()),  # staging table and merge (CockroachDB's path)
    ],
    ids=["copy-plain", "copy-merged", "jdbc"],
)
def test_the_callback_runs_once_after_every_task_of_the_run_succeeded_and_a_rerun_adds_nothing(
    spark, pg_db, writer, columns
):
    ran: list = []
    app = _app(pg_db, ran)
    options = WriteOptions(partitions=2, chunks=4, merge_workers=2, writer=writer)
    try:
        df = _frame(spark, 40)
        first = enqueue_dataframe(
            df, "rows", run_id="nightly", dsn=pg_db.dsn, options=options, columns=columns, task="item", then="done"
        )
        assert first.enqueued == 40 and first.callback_workflow and not first.callback_released
        assert app.workflow_status(first.callback_workflow).steps[0].state == "waiting"
        again = enqueue_dataframe(
            df, "rows", run_id="nightly", dsn=pg_db.dsn, options=options, columns=columns, task="item", then="done"
        )
        assert (again.enqueued, again.callback_workflow, again.callback_released) == (0, first.callback_workflow, False)
        assert _callback_tasks(pg_db) == 1
        counts = app.work(until_empty=True)
        assert counts.acked == 41 and counts.dead == 0
        assert sorted(ran[:-1]) == list(range(40)) and ran[-1] == "done"
        assert app.workflow_status(first.callback_workflow).state == "succeeded"
        # Re-running the finished job (even without then=) enqueues nothing, the callback included.
        late = enqueue_dataframe(
            df, "rows", run_id="nightly", dsn=pg_db.dsn, options=options, columns=columns, task="item"
        )
        assert (late.enqueued, late.callback_released) == (0, False) and pg_db.count() == 0
        assert ran.count("done") == 1
    finally:
        app.close()


def test_a_job_that_failed_half_way_and_ran_again_runs_the_callback_once_after_its_last_task(spark, pg_db):
    ran: list = []
    app = _app(pg_db, ran)
    options = WriteOptions(partitions=1, chunks=8, merge_workers=1, writer="copy")
    try:
        df = _frame(spark, 80)
        with chunks_fail_after(pg_db, "half", 3), pytest.raises(DatabaseError, match="refused by the test"):
            enqueue_dataframe(df, "rows", run_id="half", dsn=pg_db.dsn, options=options, task="item", then="done")
        # Every task of the chunks written so far succeeds: the run is not complete, nothing is released.
        app.work(until_empty=True)
        assert 0 < len(ran) < 80 and "done" not in ran
        result = enqueue_dataframe(df, "rows", run_id="half", dsn=pg_db.dsn, options=options, task="item", then="done")
        assert result.skipped_chunks == 3 and result.run_tasks == 80 and not result.callback_released
        app.work(until_empty=True)
        assert sorted(n for n in ran if n != "done") == list(range(80)) and ran[-1] == "done"
        assert ran.count("done") == 1
    finally:
        app.close()


def test_a_dead_task_of_the_run_cancels_the_callback_and_a_rerun_does_not_bring_it_back(spark, pg_db):
    ran: list = []
    app = _app(pg_db, ran, fail=7)
    options = WriteOptions(partitions=2, chunks=4, merge_workers=2)
    try:
        df = _frame(spark, 20)
        item, done = app.item, app.done  # the task itself: its max_attempts=1 applies to the rows
        result = enqueue_dataframe(df, "rows", run_id="bad", dsn=pg_db.dsn, options=options, task=item, then=done)
        counts = app.work(until_empty=True)
        assert counts.dead == 1 and counts.acked == 19 and "done" not in ran
        status = app.workflow_status(result.callback_workflow)
        assert status.state == "cancelled" and status.steps[0].state == "cancelled"
        again = enqueue_dataframe(df, "rows", run_id="bad", dsn=pg_db.dsn, options=options, task=item, then=done)
        assert (again.enqueued, again.callback_released) == (0, False)
        assert app.work(until_empty=True).acked == 0 and "done" not in ran
    finally:
        app.close()


def test_a_callback_cannot_change_or_be_added_to_a_run_already_merged_without_one(spark, pg_db):
    options = WriteOptions(partitions=1, chunks=2)
    df = _frame(spark, 4)
    enqueue_dataframe(df, "rows", run_id="plain", dsn=pg_db.dsn, options=options, task="item")
    with pytest.raises(InvalidInput, match="without then="):
        enqueue_dataframe(df, "rows", run_id="plain", dsn=pg_db.dsn, options=options, task="item", then="done")
    enqueue_dataframe(df, "rows", run_id="with", dsn=pg_db.dsn, options=options, task="item", then="done")
    with pytest.raises(InvalidInput, match="has callback 'done'"):
        enqueue_dataframe(df, "rows", run_id="with", dsn=pg_db.dsn, options=options, task="item", then="other")
    with pytest.raises(InvalidInput, match="exclusive key"):
        enqueue_dataframe(
            df,
            "rows",
            run_id="keyed",
            dsn=pg_db.dsn,
            options=options,
            task="item",
            then="done",
            columns=TaskColumns(exclusive_key="key"),
        )


def test_cli_spark_enqueue_then_releases_the_callback_once_over_reruns(spark, pg_db, tmp_path):
    from click.testing import CliRunner

    from shardq.cli.main import cli

    ran: list = []
    app = _app(pg_db, ran)
    data = tmp_path / "rows.json"
    data.write_text("".join(f'{{"args": "{{\\"n\\": {i}}}"}}\n' for i in range(12)))
    args = [
        "--dsn",
        pg_db.dsn.conninfo,
        "spark-enqueue",
        "rows",
        "--input",
        str(data),
        "--task",
        "item",
        "--then",
        "done",
        "--partitions",
        "1",
        "--chunks",
        "2",
    ]
    try:
        first = CliRunner().invoke(cli, args)
        assert first.exit_code == 0, first.output
        assert "enqueued 12 into rows" in first.output and "callback done: waits for the run" in first.output
        app.work(until_empty=True)
        second = CliRunner().invoke(cli, args)  # the same input again: a re-run
        assert second.exit_code == 0, second.output
        assert "enqueued 0 into rows" in second.output
        assert sorted(n for n in ran if n != "done") == list(range(12)) and ran.count("done") == 1
        assert pg_db.count() == 0
        stream = CliRunner().invoke(cli, args + ["--stream", "--checkpoint", str(tmp_path / "cp")])
        assert stream.exit_code != 0 and "--then does not apply to --stream" in stream.output
    finally:
        app.close()


def test_a_run_smaller_than_its_chunks_and_an_empty_one_complete_and_release_their_callbacks(spark, pg_db):
    ran: list = []
    app = _app(pg_db, ran)
    options = WriteOptions(partitions=2, chunks=16, writer="copy")  # most chunks get no row
    try:
        small = enqueue_dataframe(
            _frame(spark, 3), "rows", run_id="small", dsn=pg_db.dsn, options=options, task="item", then="done"
        )
        assert small.run_tasks == 3 and not small.callback_released
        app.work(until_empty=True)
        assert sorted(n for n in ran if n != "done") == [0, 1, 2] and ran[-1] == "done"
        empty = enqueue_dataframe(
            _frame(spark, 0), "rows", run_id="empty", dsn=pg_db.dsn, options=options, task="item", then="done"
        )
        assert (empty.run_tasks, empty.callback_released) == (0, True)
        app.work(until_empty=True)
        assert ran.count("done") == 2
    finally:
        app.close()
