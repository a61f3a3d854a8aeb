"""`shardq task ID` and `shardq history QUEUE`: a task's state by id, a queue's finished tasks."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import click

from shardq.cli.group import cli, client_from


def _when(t: dt.datetime | None) -> str:
    return f"{t:%Y-%m-%d %H:%M:%S %Z}" if t else "-"


def _seconds(s: float | None) -> str:
    return f"{s:.3f}s" if s is not None else "-"


@cli.command("task")
@click.argument("task_id")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def task(ctx, task_id, as_json) -> None:
    """The state of task TASK_ID now, and its attempts. An id shardq knows nothing of (never
    enqueued, or finished in a queue that keeps nothing) is state "unknown"; a malformed id exits 2."""
    status = client_from(ctx).status(task_id)
    if as_json:
        click.echo(json.dumps(status.as_json(), indent=2))
        return
    state = status.state
    if state == "running":
        state += f" (attempt {status.attempt})"
    elif status.run_at is not None:
        state += f" (at {_when(status.run_at)})"
    click.echo(f"{status.id}: {state}")
    if status.state == "unknown":
        return
    click.echo(
        f"  queue {status.queue}, task {status.task or '-'}, enqueued {_when(status.created_at)}, "
        f"attempts {status.attempts}, run time {_seconds(status.total_run_seconds)}"
    )
    if status.finished_at is not None:
        click.echo(f"  finished {_when(status.finished_at)}")
    for a in status.history:
        click.echo(
            f"  attempt {a.attempt}: {a.outcome}, ended {_when(a.ended_at)}, ran {_seconds(a.run_seconds)}"
            + (f": {a.error.splitlines()[0] if a.error.strip() else ''}" if a.error else "")
        )
    if status.last_error and not status.history:
        click.echo(f"  last error: {status.last_error.splitlines()[0] if status.last_error.strip() else ''}")
    if status.result is not None:
        click.echo(f"  result: {status.result[:200]}")
    if status.waiting_for is not None:
        click.echo(f"  waiting for signal {status.waiting_for!r}")
    if status.progress is not None:
        click.echo(f"  progress: {status.progress[:200]}")


def _since(text: str | None) -> dt.datetime | None:
    """--since: a duration back from now (30m, 12h, 7d) or an ISO time (UTC when no zone)."""
    from shardq import validation
    from shardq.errors import InvalidInput

    if text is None:
        return None
    try:
        return dt.datetime.now(dt.UTC) - dt.timedelta(seconds=validation.duration(text, "--since"))
    except InvalidInput:
        pass
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(f"--since must be a duration (30m, 12h, 7d) or an ISO time, got {text!r}") from None
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


def _after(text: str | None) -> tuple[dt.datetime, uuid.UUID] | None:
    from shardq.errors import InvalidInput

    if text is None:
        return None
    try:
        at, task_id = text.rsplit("/", 1)
        return dt.datetime.fromisoformat(at), uuid.UUID(task_id)
    except ValueError:
        raise InvalidInput(f"--after takes the cursor a previous page printed, got {text!r}") from None


@cli.command("history")
@click.argument("queue")
@click.option("--state", type=click.Choice(["succeeded", "dead", "cancelled"]), help="Only tasks that ended so.")
@click.option(
    "--since", metavar="WHEN", help="Only tasks finished since: a duration back (30m, 12h, 7d) or an ISO time."
)
@click.option("--limit", type=int, default=50, show_default=True, help="Tasks per page (at most 1000).")
@click.option("--after", metavar="CURSOR", help="The next page: the cursor the previous page printed.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def history_list(ctx, queue, state, since, limit, after, as_json) -> None:
    """Finished tasks of QUEUE, newest first (kept while the queue's --keep-finished lasts)."""
    tasks = client_from(ctx).history(queue, state=state, since=_since(since), after=_after(after), limit=limit)
    cursor = f"{tasks[-1].finished_at.isoformat()}/{tasks[-1].id}" if len(tasks) == limit else None
    if as_json:
        click.echo(json.dumps({"tasks": [t.as_json() for t in tasks], "next": cursor}, indent=2))
        return
    for t in tasks:
        line = f"{t.id}  {t.state:<9}  {_when(t.finished_at)}  attempts={t.attempts}  ran={_seconds(t.run_seconds)}"
        line += f"  {t.task or '-'}"
        if t.last_error:
            line += f"  {t.last_error.splitlines()[0][:120] if t.last_error.strip() else ''}"
        click.echo(line)
    click.echo(f"{len(tasks)} finished task(s)" + (f"; next page: --after {cursor}" if cursor else ""))
