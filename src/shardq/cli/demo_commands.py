"""`shardq demo`: the Spark → shardq pipeline end to end, with a killed worker (needs the `spark` extra)."""

from __future__ import annotations

import sys

import click

from shardq.cli.group import cli, dsn_from


@cli.command("demo")
@click.option("--tasks", type=int, default=None, help="Tasks Spark generates (default: about a minute of work).")
@click.option("--workers", type=int, default=4, show_default=True, help="`shardq work` processes.")
@click.option("--no-kill", is_flag=True, help="Do not SIGKILL a worker half-way.")
@click.pass_context
def demo(ctx, tasks, workers, no_kill) -> None:
    """Migrate, enqueue N tasks from Spark via JDBC, drain them with worker processes while the
    reaper runs (one worker is killed half-way), and report throughput, latency and dead letters.
    Exits 1 unless every task was processed."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from shardq.cli.demo import TASKS_DEFAULT, run_demo

    console = Console()
    labels = {"spark": "start Spark", "write": "Spark → tasks", "merge": "merge chunks", "drain": "drain"}
    with Progress(
        TextColumn("{task.description:>16}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not sys.stdout.isatty(),
    ) as bar:
        lines: dict[str, int] = {}

        def progress(phase: str, done: int, total: int) -> None:
            if phase == "kill":
                bar.console.print(f"killed worker pid {done} (SIGKILL); its leases expire and the reaper returns them")
                return
            if phase not in lines:
                lines[phase] = bar.add_task(labels.get(phase, phase), total=total)
            bar.update(TaskID(lines[phase]), completed=done, total=total)

        report = run_demo(
            tasks=tasks or TASKS_DEFAULT, workers=workers, dsn=dsn_from(ctx), kill_one=not no_kill, progress=progress
        )

    def ms(value):
        return "-" if value is None else f"{value * 1000:,.0f} ms"

    writers = {"copy": "the Spark executors COPY chunks in", "jdbc": "Spark stages over JDBC; a merge"}
    table = Table(title=f"shardq demo: {report.tasks:,} tasks, {report.workers} workers, queue {report.queue}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_column("what it means")
    table.add_row("enqueued by", report.writer or "-", writers.get(report.writer, "nothing was written"))
    table.add_row(
        "enqueue rate",
        f"{report.enqueue_rate:,.0f} tasks/s  ({report.enqueue_seconds:.1f} s)",
        "DataFrame → committed tasks",
    )
    table.add_row(
        "drain rate", f"{report.drain_rate:,.0f} tasks/s  ({report.drain_seconds:.1f} s)", "first start → queue empty"
    )
    table.add_row(
        "backlog wait p50",
        ms(report.latency_p50),
        "commit → first start; all tasks come at once, so the backlog's wait, not a queue latency",
    )
    table.add_row("backlog wait p99", ms(report.latency_p99), "the same, 99th percentile")
    table.add_row("killed worker", str(report.killed_worker or "-"), "SIGKILLed at 40 % done")
    table.add_row(
        "returned by the reaper", f"{report.came_back:,}", "ran again (attempt ≥ 2) after their lease expired"
    )
    table.add_row("starts beyond the first", f"{report.started_twice:,}", "repeats: delivery is at-least-once")
    table.add_row("dead letters", f"{report.dead:,}", "failed for good (0 expected)")
    table.add_row("never started / left", f"{report.never_started:,} / {report.left_in_queue:,}", "0 / 0 expected")
    table.add_row(
        "result",
        "[green]PASS[/green]" if report.passed else "[red]FAIL[/red]",
        "all started, queue empty, no dead letters",
    )
    console.print(table)
    for problem in report.problems:
        click.echo(f"shardq demo: {problem}", err=True)
    if not report.passed:
        ctx.exit(1)
