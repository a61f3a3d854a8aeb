"""`shardq queue show|set|pause|resume`: per-queue settings."""

from __future__ import annotations

import json

import click

from shardq.cli.group import cli, client_from


def _limits(settings, usage) -> str:
    parts = []
    if settings.concurrency_limit is not None:
        in_use = usage.get(settings.name, (0, 0))[0] if usage is not None else None
        parts.append(
            f"concurrency {settings.concurrency_limit}" + (f" ({in_use} in use)" if in_use is not None else "")
        )
    if settings.rate_limit is not None:
        parts.append(f"rate {settings.rate_limit}/s (burst {settings.burst})")
    return ", " + ", ".join(parts) if parts else ""


def _print(settings, usage=None) -> None:
    click.echo(
        f"{settings.name}: lease {settings.lease_seconds:g}s, max attempts {settings.max_attempts}, "
        f"backoff {settings.backoff_base:g}s..{settings.backoff_cap:g}s (jitter {settings.retry_jitter:g}), "
        f"latest-only backlog {'on' if settings.exclusive_latest_only else 'off'}, "
        f"enqueue {'paused' if settings.paused_enqueue else 'open'}, "
        f"dequeue {'paused' if settings.paused_dequeue else 'open'}"
        + (f", timeout {settings.timeout_seconds:g}s" if settings.timeout_seconds is not None else "")
        + _limits(settings, usage)
        + (
            f", keeps finished tasks {_duration(settings.keep_finished_seconds)}"
            if settings.keep_finished_seconds
            else ""
        )
        + (", keeps results" if settings.results_kept else "")
    )
    if settings.keep_results and not settings.results_kept:
        click.echo(
            f"  note: {settings.name} keeps results only while it keeps finished tasks "
            "(--keep-finished DURATION); it keeps none now"
        )


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


@cli.group("queue")
def queue() -> None:
    """Show and change per-queue settings, pause and resume queues."""


@queue.command("show")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def queue_show(ctx, name, as_json) -> None:
    """Settings of queue NAME, or of every queue."""
    from shardq.errors import ShardqError

    client = client_from(ctx)
    if name is None:
        items = client.queues()
    else:
        found = client.queue_settings(name)
        if found is None:
            raise ShardqError(f"no queue named {name!r}")
        items = [found]
    usage = client.flow_usage()
    if as_json:
        click.echo(json.dumps([{**s.as_json(), **_usage_json(s, usage)} for s in items], indent=2))
        return
    for settings in items:
        _print(settings, usage)


def _usage_json(settings, usage) -> dict:
    if settings.concurrency_limit is None:
        return {}
    return {"slots_in_use": usage.get(settings.name, (0, 0))[0]}


@queue.command("set")
@click.argument("name")
@click.option("--lease", "lease_seconds", type=float, help="Lease per claim, seconds (at least 1).")
@click.option("--max-attempts", type=int, help="Attempts before dead-lettering (new tasks).")
@click.option("--backoff-base", type=float, help="First retry delay, seconds (doubles each attempt).")
@click.option("--backoff-cap", type=float, help="Longest retry delay, seconds.")
@click.option(
    "--jitter", "retry_jitter", type=float, help="Share of the delay drawn at random, 0..1 (1 = full jitter)."
)
@click.option(
    "--timeout",
    "timeout_seconds",
    type=float,
    help="Execution timeout, seconds: a task running longer fails its attempt (over a worker's --timeout).",
)
@click.option("--no-timeout", "timeout_clear", is_flag=True, default=None, help="Remove the queue's timeout.")
@click.option(
    "--latest-only/--keep-all",
    "exclusive_latest_only",
    default=None,
    help="Keep only the newest backlog entry per exclusive key.",
)
@click.option(
    "--concurrency",
    type=int,
    metavar="N",
    help="At most N tasks of the queue run at once across all workers (0 removes the limit).",
)
@click.option(
    "--rate", type=int, metavar="R", help="At most R task starts per second across all workers (0 removes the limit)."
)
@click.option("--burst", type=int, metavar="B", help="With --rate: up to B starts at once (default R).")
@click.option(
    "--keep-finished",
    "keep_finished",
    metavar="DURATION",
    help="Keep finished tasks (succeeded, dead, cancelled) in the history this long: 90, 30m, 12h, 7d "
    "(0: not kept, the default).",
)
@click.option(
    "--keep-results/--no-keep-results",
    "keep_results",
    default=None,
    help="Keep every succeeded task's JSON-encoded return value with its history row, as "
    "@app.task(result=True) does (needs --keep-finished).",
)
@click.pass_context
def queue_set(ctx, name, keep_finished, **changes) -> None:
    """Change settings of queue NAME (created with defaults if new)."""
    from shardq import validation

    if keep_finished is not None:
        changes["keep_finished_seconds"] = validation.duration(keep_finished, "--keep-finished")

    client = client_from(ctx)
    settings = client.set_queue(name, **changes)
    _print(settings, client.flow_usage() if settings is not None and settings.limited else None)


def _pause_command(name: str, paused: bool, summary: str):
    @queue.command(name, help=summary)
    @click.argument("queue_name", metavar="NAME")
    @click.option("--enqueue", "enqueue_only", is_flag=True, help="Only enqueue.")
    @click.option("--dequeue", "dequeue_only", is_flag=True, help="Only dequeue (claims).")
    @click.pass_context
    def command(ctx, queue_name, enqueue_only, dequeue_only) -> None:
        both = not enqueue_only and not dequeue_only
        client = client_from(ctx)
        change = client.pause if paused else client.resume
        _print(change(queue_name, enqueue=both or enqueue_only, dequeue=both or dequeue_only))

    return command


queue_pause = _pause_command("pause", True, "Pause enqueue and/or dequeue of queue NAME (both by default).")
queue_resume = _pause_command("resume", False, "Resume enqueue and/or dequeue of queue NAME (both by default).")
