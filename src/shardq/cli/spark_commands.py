"""`shardq spark-enqueue`, `shardq spark-gc` (needs ``pip install 'shardq[spark]'``)."""

from __future__ import annotations

import json
import sys
from contextlib import nullcontext

import click
from rich.progress import TaskID

from shardq.cli.group import cli, dsn_from


@cli.command("spark-enqueue")
@click.argument("queue")
@click.option("--input", "input_path", required=True, metavar="PATH", help="A file or a directory of part files.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["parquet", "csv", "json"]),
    default=None,
    help="Input format (default: from the file extension, else parquet).",
)
@click.option(
    "--payload-column", default="payload", show_default=True, help="Binary or string column: the task payload."
)
@click.option("--dedupe-column", default=None, help="String column: the task's dedupe key.")
@click.option("--run-at-column", default=None, help="Timestamp column: when each task becomes due.")
@click.option("--delay-column", default=None, help="Numeric column: seconds until each task becomes due.")
@click.option("--max-attempts-column", default=None, help="Integer column: attempts before dead-lettering.")
@click.option("--priority-column", default=None, help="Integer column: the task's priority (lower runs first).")
@click.option(
    "--key-column", default=None, help="String column: the task's exclusive key (one task per key runs at a time)."
)
@click.option("--row-key-column", default=None, help="Column that identifies each input row (saves a shuffle).")
@click.option(
    "--task",
    "task_name",
    default=None,
    metavar="NAME",
    help="Each row calls this app task (shardq work --app runs it); its arguments are --args-column.",
)
@click.option(
    "--args-column",
    default="args",
    show_default=True,
    help="With --task: the arguments, a struct, map or JSON-object string column.",
)
@click.option(
    "--then",
    "then_task",
    default=None,
    metavar="TASK",
    help="Enqueue this app task (no arguments, into QUEUE) once every task of the run succeeded; "
    "once per run id, re-runs included.",
)
@click.option(
    "--stream",
    is_flag=True,
    help="Read the --input directory as a stream, one micro-batch per trigger; needs --checkpoint.",
)
@click.option(
    "--checkpoint",
    default=None,
    metavar="DIR",
    help="With --stream: where the stream keeps its identity and the files it has taken.",
)
@click.option("--follow", is_flag=True, help="With --stream: keep taking new files until interrupted.")
@click.option(
    "--max-files-per-trigger",
    type=int,
    default=None,
    metavar="N",
    help="With --stream: at most N files per micro-batch.",
)
@click.option(
    "--run-id",
    default=None,
    metavar="ID",
    help="Names the job; the same id again is a re-run. Default: derived from QUEUE, the mapping and "
    "the input's paths, sizes and modification times.",
)
@click.option("--partitions", type=int, default=4, show_default=True, help="Spark write partitions (JDBC connections).")
@click.option("--batch-size", type=int, default=1024, show_default=True, help="Rows per JDBC batch (multiple of 128).")
@click.option("--chunks", type=int, default=None, help="Merge transactions per run (default 64; 256 on CockroachDB).")
@click.option("--merge-workers", type=int, default=2, show_default=True, help="Chunks merged concurrently.")
@click.option("--master", default="local[2]", show_default=True, help="Spark master.")
@click.option(
    "--jdbc-jar",
    default=None,
    metavar="PATH",
    envvar="SHARDQ_JDBC_JAR",
    help="PostgreSQL JDBC driver jar (default: Debian's, then ~/.m2, then Maven).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def spark_enqueue(
    ctx,
    queue,
    input_path,
    fmt,
    payload_column,
    dedupe_column,
    run_at_column,
    delay_column,
    max_attempts_column,
    priority_column,
    key_column,
    row_key_column,
    task_name,
    args_column,
    then_task,
    stream,
    checkpoint,
    follow,
    max_files_per_trigger,
    run_id,
    partitions,
    batch_size,
    chunks,
    merge_workers,
    master,
    jdbc_jar,
    as_json,
) -> None:
    """Enqueue every row of the input into QUEUE through Spark and JDBC, exactly once per run id
    (with --stream: every file of the directory, exactly once per checkpoint)."""
    from shardq.errors import InvalidInput
    from shardq.spark.columns import TaskColumns
    from shardq.spark.files import enqueue_file
    from shardq.spark.options import WriteOptions
    from shardq.spark.stream import enqueue_directory_stream

    columns = TaskColumns(
        payload=payload_column,
        run_at=run_at_column,
        delay=delay_column,
        dedupe_key=dedupe_column,
        max_attempts=max_attempts_column,
        priority=priority_column,
        exclusive_key=key_column,
        row_key=row_key_column,
    )
    options = WriteOptions(partitions=partitions, batch_size=batch_size, chunks=chunks, merge_workers=merge_workers)
    if not stream:
        for given, flag in (
            (checkpoint, "--checkpoint"),
            (follow, "--follow"),
            (max_files_per_trigger, "--max-files-per-trigger"),
        ):
            if given:
                raise InvalidInput(f"{flag} applies to --stream only")
    if stream:
        if not checkpoint:
            raise InvalidInput("--stream needs --checkpoint DIR (it keeps the stream's identity across restarts)")
        if run_id:
            raise InvalidInput(
                "--run-id does not apply to --stream (each micro-batch's run id comes from the checkpoint)"
            )
        if then_task:
            raise InvalidInput("--then does not apply to --stream (a stream has no last task)")

        def batch_done(batch_id, result) -> None:
            if as_json:
                click.echo(json.dumps({"batch": batch_id, **result.as_json()}, sort_keys=True))
            else:
                click.echo(
                    f"batch {batch_id}: enqueued {result.enqueued} into {result.queue} "
                    f"({result.merged_chunks} chunks merged, {result.skipped_chunks} merged before) "
                    f"in {result.seconds:.1f}s"
                )

        enqueue_directory_stream(
            queue,
            input_path,
            checkpoint=checkpoint,
            fmt=fmt,
            columns=columns,
            options=options,
            task=task_name,
            args_col=args_column,
            follow=follow,
            max_files_per_trigger=max_files_per_trigger,
            dsn=dsn_from(ctx),
            master=master,
            jdbc_jar=jdbc_jar,
            on_batch=batch_done,
        )
        return
    show = sys.stdout.isatty() and not as_json
    with _progress() if show else nullcontext(None) as report:
        result = enqueue_file(
            queue,
            input_path,
            fmt=fmt,
            columns=columns,
            options=options,
            run_id=run_id,
            dsn=dsn_from(ctx),
            master=master,
            jdbc_jar=jdbc_jar,
            progress=report,
            task=task_name,
            args_col=args_column,
            then=then_task,
        )
    if as_json:
        click.echo(json.dumps(result.as_json(), indent=2, sort_keys=True))
        return
    click.echo(
        f"run {result.run_id}: enqueued {result.enqueued} into {result.queue} "
        f"({result.merged_chunks} chunks merged, {result.skipped_chunks} merged before; "
        f"{result.run_tasks} tasks over all attempts) in {result.seconds:.1f}s"
    )
    if result.callback_workflow:
        click.echo(
            f"callback {then_task or ''}: {'released' if result.callback_released else 'waits for the run'}; "
            f"shardq workflow {result.callback_workflow} shows it"
        )


class _progress:
    """A rich progress display fed by the job's ``progress(phase, done, total)`` callback."""

    def __enter__(self):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.bar = Progress(
            TextColumn("{task.description:>14}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            transient=False,
        )
        self.bar.__enter__()
        self.lines: dict[str, int] = {}
        return self.update

    def update(self, phase: str, done: int, total: int) -> None:
        label = {"start": "starting Spark", "write": "Spark write", "merge": "merge chunks"}.get(phase, phase)
        if phase not in self.lines:
            self.lines[phase] = self.bar.add_task(label, total=total or None)
        self.bar.update(TaskID(self.lines[phase]), completed=done, total=total or None)

    def __exit__(self, *exc):
        return self.bar.__exit__(*exc)


@cli.command("spark-gc")
@click.option(
    "--older-than",
    type=float,
    default=24.0,
    show_default=True,
    metavar="HOURS",
    help="Drop staging tables (of crashed Spark attempts) older than this.",
)
@click.option(
    "--forget-runs-after",
    type=float,
    default=None,
    metavar="DAYS",
    help="Also forget Spark runs older than this; running one again then enqueues it again.",
)
@click.pass_context
def spark_gc(ctx, older_than, forget_runs_after) -> None:
    """Drop staging tables left behind by killed Spark enqueue attempts (and, optionally, old run ledgers)."""
    from shardq.spark.cleanup import gc

    result = gc(
        dsn_from(ctx),
        stage_max_age_seconds=older_than * 3600,
        ledger_max_age_seconds=None if forget_runs_after is None else forget_runs_after * 86400,
    )
    click.echo(f"dropped {result.stages_dropped} staging table(s), forgot {result.runs_forgotten} run(s)")
