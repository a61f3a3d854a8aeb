"""`shardq stats`, `shardq dead …`, `shardq buckets …`."""

from __future__ import annotations

import json

import click

from shardq.cli.group import cli, client_from


def _echo_json(data) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def _stats_options(function):
    """Options shared by `stats` and `top`."""
    for option in reversed(
        [
            click.option(
                "--window",
                "window_minutes",
                type=int,
                default=5,
                show_default=True,
                metavar="MINUTES",
                help="Rates over the current minute and this many full minutes before it.",
            ),
            click.option(
                "--bucket-cap",
                type=int,
                default=10_000,
                show_default=True,
                metavar="N",
                help="Rows counted at most per queue, bucket and state; a count that reaches it shows as >=N.",
            ),
            click.option(
                "--current",
                is_flag=True,
                help="CockroachDB: read the current state instead of a follower read (~5 s old, never blocks claimers).",
            ),
        ]
    ):
        function = option(function)
    return function


def _fetcher(ctx, window_minutes: int, bucket_cap: int, current: bool):
    from shardq.client import stats_options

    # Checked now, before the first snapshot (a bad option exits 2 at once, also with --watch).
    options = {"bucket_cap": bucket_cap, "window_minutes": window_minutes, "follower_read": not current}
    stats_options(options)
    client = client_from(ctx)
    return lambda: client.stats(**options)


@cli.command("stats")
@click.option(
    "--json", "as_json", is_flag=True, help="Machine-readable output (with --watch: one JSON object per line)."
)
@click.option("--per-bucket", is_flag=True, help="JSON: add each queue's depth per bucket.")
@click.option("--watch", is_flag=True, help="Refresh every --interval seconds until Ctrl-C.")
@click.option("--interval", type=click.FloatRange(min=0.1), default=2.0, show_default=True, metavar="SECONDS")
@click.option(
    "--iterations", type=click.IntRange(min=1), default=None, metavar="N", help="With --watch: stop after N snapshots."
)
@_stats_options
@click.pass_context
def stats(ctx, as_json, per_bucket, watch, interval, iterations, window_minutes, bucket_cap, current) -> None:
    """Per queue: ready, scheduled, leased, dead, oldest due task's age, enqueue / completion /
    failure rates and estimated lead time. Bounded work at any table size: counts that reach the
    per-bucket cap show as >=N (see `shardq.admin.stats`)."""
    from shardq.cli import terminal as dashboard

    fetch = _fetcher(ctx, window_minutes, bucket_cap, current)
    if as_json and watch:
        for snapshot in dashboard.iterate(fetch, interval=interval, iterations=iterations):
            click.echo(json.dumps(snapshot.as_json(per_bucket=per_bucket), sort_keys=True, default=str))
        return
    if as_json:
        _echo_json(fetch().as_json(per_bucket=per_bucket))
        return
    if watch:
        dashboard.run_live(
            fetch, lambda s, error: dashboard.stats_view(s), interval=interval, iterations=iterations, keys=False
        )
        return
    dashboard.make_console().print(dashboard.stats_view(fetch()))


@cli.command("top")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=2.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds between refreshes.",
)
@click.option("--iterations", type=click.IntRange(min=1), default=None, metavar="N", help="Stop after N frames.")
@_stats_options
@click.pass_context
def top(ctx, interval, iterations, window_minutes, bucket_cap, current) -> None:
    """A live dashboard of every queue (depth, rates, failures, lead time, handler time) and of
    the depth per bucket, so skew shows. Press q or Ctrl-C to leave."""
    from shardq.cli import terminal as dashboard

    fetch = _fetcher(ctx, window_minutes, bucket_cap, current)
    dashboard.run_live(
        fetch,
        lambda s, error: dashboard.dashboard(s, interval=interval, error=error),
        interval=interval,
        iterations=iterations,
    )


@cli.group("dead")
def dead() -> None:
    """List, requeue and purge dead-lettered tasks."""


@dead.command("list")
@click.argument("queue")
@click.option("--json", "as_json", is_flag=True)
@click.option("--limit", type=int, default=100, show_default=True)
@click.pass_context
def dead_list(ctx, queue, as_json, limit) -> None:
    """Dead tasks of QUEUE, oldest first."""
    tasks = client_from(ctx).dead_tasks(queue, limit=limit)
    if as_json:
        _echo_json(
            [
                {
                    "id": t.id,
                    "queue": t.queue,
                    "attempts": t.attempts,
                    "last_error": t.last_error,
                    "died_at": t.died_at.isoformat(),
                    "payload": t.payload.decode("utf-8", "replace"),
                }
                for t in tasks
            ]
        )
        return
    for t in tasks:
        click.echo(f"{t.id}  attempts={t.attempts}  died={t.died_at:%Y-%m-%d %H:%M:%S}  {t.last_error or ''}")
    click.echo(f"{len(tasks)} dead task(s)")


@dead.command("requeue")
@click.argument("queue")
@click.argument("ids", nargs=-1)
@click.option("--all", "all_tasks", is_flag=True, help="Requeue every dead task of QUEUE.")
@click.pass_context
def dead_requeue(ctx, queue, ids, all_tasks) -> None:
    """Move dead tasks of QUEUE back into it (all of them, or the given IDs)."""
    result = client_from(ctx).requeue_dead(queue, list(ids), all_tasks=all_tasks)
    message = f"requeued {result.requeued}"
    if result.not_found_or_kept:
        message += f" ({result.not_found_or_kept} not found or kept: live duplicate key)"
    click.echo(message)


@dead.command("purge")
@click.argument("queue")
@click.pass_context
def dead_purge(ctx, queue) -> None:
    """Delete every dead task of QUEUE."""
    click.echo(f"purged {client_from(ctx).purge_dead(queue)}")


@cli.group("buckets")
def buckets() -> None:
    """Show (and resize) the bucket layout of the tasks table."""


@buckets.command("show")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def buckets_show(ctx, as_json) -> None:
    """Bucket count, shard column (CockroachDB), rows per bucket, resize in progress."""
    report = client_from(ctx).buckets()
    if as_json:
        _echo_json(report.as_json())
        return
    layout = report.layout
    click.echo(
        f"{report.dialect}: {layout.bucket_count} buckets"
        + (f", shard column {layout.shard_column}" if layout.shard_column else "")
        + (f", resizing from {layout.resizing_from}" if layout.resizing_from is not None else "")
    )
    for job in report.schema_jobs:
        done = "" if job.fraction_completed is None else f" {job.fraction_completed:.0%}"
        click.echo(f"  resize in progress: job {job.job_id} {job.status}{done}: {job.description}")
    for bucket in range(layout.visit_count):
        click.echo(f"  bucket {bucket:4d}: {report.rows_per_bucket.get(bucket, 0)} rows")


@buckets.command("resize")
@click.argument("count", type=int)
@click.option(
    "--batch", type=int, default=1000, show_default=True, help="Rows moved per statement (PostgreSQL shrink)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (no progress display).")
@click.pass_context
def buckets_resize(ctx, count, batch, as_json) -> None:
    """Change the bucket count to COUNT (2..2048) while producers and consumers keep running.

    PostgreSQL: a shrink returns once every task has left the dropped buckets, which includes
    waiting for tasks leased there to be acked or to expire. Interrupting it is safe; run the
    command again to finish. CockroachDB: ALTER PRIMARY KEY with the new bucket count, waiting for
    its schema-change job.
    """
    import sys

    client = client_from(ctx)
    if as_json:
        result = client.resize_buckets(count, batch=batch)
        _echo_json(result.as_json())
        return
    if sys.stdout.isatty():
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
        with Progress(*columns, transient=True) as bar:
            task = bar.add_task("resizing", total=None)

            def show(progress) -> None:
                total = None
                completed = progress.fraction
                if progress.fraction is not None:
                    total = 1.0
                elif progress.movable_left or progress.leased_left or progress.moved:
                    total = progress.moved + progress.movable_left + progress.leased_left
                    completed = progress.moved
                bar.update(task, description=f"{progress.phase}: {progress.detail}", total=total, completed=completed)

            result = client.resize_buckets(count, batch=batch, on_progress=show)
    else:
        last: list[str | None] = [None]

        def show(progress) -> None:
            line = f"{progress.phase}: {progress.detail}"
            if progress.phase != "done" and line != last[0]:
                click.echo(line)
                last[0] = line

        result = client.resize_buckets(count, batch=batch, on_progress=show)
    click.echo(result.message)
