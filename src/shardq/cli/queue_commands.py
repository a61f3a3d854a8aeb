"""`shardq enqueue`, `shardq work`, `shardq reap`."""

from __future__ import annotations

import sys
import threading

import click

from shardq.cli.group import cli, client_from
from shardq.worker import config as worker_config


@cli.command("enqueue")
@click.argument("queue")
@click.argument("payload", required=False)
@click.option("--lines", is_flag=True, help="Read one task payload per line of standard input.")
@click.option(
    "--delay", type=float, default=None, metavar="SECONDS", help="Run no earlier than this many seconds from now."
)
@click.option("--dedupe-key", default=None, metavar="KEY", help="Skip if a live task of the queue has this key.")
@click.option("--max-attempts", type=int, default=None, help="Attempts before dead-lettering (default: the queue's).")
@click.option("--priority", type=int, default=0, show_default=True, help="Lower runs first.")
@click.option(
    "--key",
    "exclusive_key",
    default=None,
    metavar="KEY",
    help="Exclusive key: at most one task of the queue with this key runs at a time.",
)
@click.option(
    "--concurrency-key",
    default=None,
    metavar="KEY",
    help="Concurrency key: at most the queue's limit for this key run at a time (queue key-limit).",
)
@click.option(
    "--debounce",
    type=float,
    default=None,
    metavar="SECONDS",
    help="With --dedupe-key: replace the key's waiting task; it runs once the key was quiet this long.",
)
@click.option(
    "--throttle",
    type=float,
    default=None,
    metavar="SECONDS",
    help="With --dedupe-key: enqueue the key's first task in each window this long, drop the rest.",
)
@click.pass_context
def enqueue(
    ctx,
    queue,
    payload,
    lines,
    delay,
    dedupe_key,
    max_attempts,
    priority,
    exclusive_key,
    concurrency_key,
    debounce,
    throttle,
) -> None:
    """Enqueue PAYLOAD (or standard input) into QUEUE; print how many were enqueued."""
    from shardq.errors import InvalidInput
    from shardq.models.tasks import NewTask

    if lines and payload is not None:
        raise InvalidInput("give a PAYLOAD or --lines, not both")
    if lines and dedupe_key:
        raise InvalidInput("--dedupe-key names one task; it cannot go with --lines")
    if lines:
        payloads = [line.rstrip(b"\r\n") for line in sys.stdin.buffer]
    elif payload is not None:
        payloads = [payload.encode("utf-8")]
    else:
        payloads = [sys.stdin.buffer.read()]
    tasks = [
        NewTask(
            p,
            delay=delay,
            dedupe_key=dedupe_key,
            max_attempts=max_attempts,
            priority=priority,
            exclusive_key=exclusive_key,
            concurrency_key=concurrency_key,
            debounce=debounce,
            throttle=throttle,
        )
        for p in payloads
    ]
    result = client_from(ctx).enqueue_many(queue, tasks)
    message = f"enqueued {result.enqueued}"
    notes = []
    if result.duplicates:
        notes.append(f"duplicates skipped: {result.duplicates}")
    if result.backlogged_ids:
        notes.append(f"waiting in the key's backlog: {len(result.backlogged_ids)}")
    if result.superseded:
        notes.append(f"older backlog entries replaced: {result.superseded}")
    if result.debounced_ids:
        notes.append(f"debounced into the waiting task: {', '.join(result.debounced_ids)}")
    if result.throttled_keys:
        notes.append(f"throttled (window open): {len(result.throttled_keys)}")
    if notes:
        message += " (" + "; ".join(notes) + ")"
    click.echo(message)


@cli.command("work")
@click.argument("queues", nargs=-1)
@click.option(
    "--handler", "handler_spec", default=None, metavar="MODULE:FUNCTION", help="The function called with each task."
)
@click.option(
    "--app",
    "app_spec",
    default=None,
    metavar="MODULE:APP",
    help="A shardq.App: run its tasks by name (QUEUES default to every queue its tasks use).",
)
@click.option(
    "--concurrency",
    type=int,
    default=worker_config.CONCURRENCY_DEFAULT,
    show_default=True,
    help="Handlers running at once (threads for sync handlers, coroutines for async ones).",
)
@click.option(
    "--share",
    "shares",
    multiple=True,
    metavar="QUEUE=N",
    help="N of the handlers for QUEUE alone (repeatable); queues without a share use the rest.",
)
@click.option(
    "--batch", type=int, default=worker_config.BATCH_DEFAULT, show_default=True, help="Tasks per claim statement."
)
@click.option(
    "--lease",
    type=float,
    default=None,
    metavar="SECONDS",
    help="Lease per claim, at least 1 (default: each queue's setting).",
)
@click.option(
    "--grace",
    type=float,
    default=worker_config.GRACE_SECONDS_DEFAULT,
    show_default=True,
    metavar="SECONDS",
    help="How long running tasks may finish after SIGTERM.",
)
@click.option("--heartbeat", is_flag=True, help="Renew leases of running tasks automatically.")
@click.option(
    "--until-empty",
    is_flag=True,
    help="Exit 0 once a full round finds nothing due, nothing is in flight and no lease has expired.",
)
@click.option(
    "--sweep/--no-sweep",
    default=True,
    show_default=True,
    help="Return crashed workers' expired leases to the queue (each worker a share; no reaper needed).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    metavar="PORT",
    help="Serve Prometheus metrics on this port (0: any free port; the URL is printed on stderr).",
)
@click.option(
    "--metrics-host",
    default="0.0.0.0",
    show_default=True,
    metavar="ADDRESS",
    help="Address the metrics endpoint listens on.",
)
@click.option(
    "--statement-timeout",
    type=float,
    default=worker_config.STATEMENT_TIMEOUT_DEFAULT,
    show_default=True,
    metavar="SECONDS",
    help="The server cancels a statement after this long (then retried with backoff); 0: no limit.",
)
@click.option(
    "--listen/--no-listen",
    default=True,
    show_default=True,
    help="PostgreSQL: when idle, wake on producers' NOTIFY instead of waiting for the next poll.",
)
@click.option(
    "--timeout",
    type=float,
    default=None,
    metavar="SECONDS",
    help="Execution timeout for tasks whose task and queue set none (default: no limit).",
)
@click.option(
    "--periodic/--no-periodic",
    default=True,
    show_default=True,
    help="With --app: take the due slots of the app's periodic tasks.",
)
@click.option(
    "--max-abandoned",
    type=int,
    default=None,
    metavar="N",
    help="Exit 1 once N sync handler threads were left running past their timeouts (default: 2 × concurrency).",
)
@click.option(
    "--gc-tuning/--no-gc-tuning",
    default=True,
    show_default=True,
    help="Raise the garbage collector's youngest threshold while working (see shardq.worker.collector).",
)
@click.pass_context
def work(
    ctx,
    queues,
    handler_spec,
    app_spec,
    concurrency,
    shares,
    batch,
    lease,
    grace,
    heartbeat,
    until_empty,
    sweep,
    metrics_port,
    metrics_host,
    statement_timeout,
    listen,
    timeout,
    periodic,
    max_abandoned,
    gc_tuning,
) -> None:
    """Run HANDLER (or an app's tasks) over tasks of QUEUES until stopped (SIGTERM/SIGINT stop
    gracefully)."""
    from shardq.cli.run_worker import EarlySignals, run_worker

    if (handler_spec is None) == (app_spec is None):
        raise click.UsageError("give exactly one of --handler MODULE:FUNCTION and --app MODULE:APP")
    if handler_spec is not None and not queues:
        raise click.UsageError("name the QUEUES a --handler works on")
    from shardq.worker import shares as worker_shares

    share_pairs = tuple(worker_shares.parse(text) for text in shares)  # bad input: exit 2 before anything runs
    if handler_spec is not None:
        worker_shares.plan(queues, concurrency, worker_shares.normalise(share_pairs))
    signals = EarlySignals.install()  # before the slow part of start-up: a stop request is never lost
    from shardq.app.application import load_app
    from shardq.app.loading import load_handler
    from shardq.worker.contract import Handler, Resolver

    handler: Handler | Resolver
    if app_spec is not None:
        app = load_app(app_spec)
        handler = app  # an App is a Resolver
        queues = tuple(queues) or tuple(app.queues())
        if not queues:
            raise click.UsageError(f"the app {app_spec} declares no tasks: nothing to work on")
    else:
        handler = load_handler(handler_spec)
    stats = run_worker(
        client_from(ctx),
        list(queues),
        handler,
        dict(
            concurrency=concurrency,
            batch=batch,
            lease_seconds=lease,
            grace_seconds=grace,
            heartbeat=heartbeat,
            until_empty=until_empty,
            statement_timeout=statement_timeout or None,
            listen=listen,
            timeout=timeout,
            max_abandoned=max_abandoned,
            periodic=periodic,
            sweep=sweep,
            gc_tuning=gc_tuning,
            shares=share_pairs or None,
        ),
        progress=sys.stdout.isatty(),
        metrics_port=metrics_port,
        metrics_host=metrics_host,
        on_metrics=lambda url: click.echo(f"metrics: {url}", err=True),
        signals=signals,
    )
    click.echo(
        f"processed {stats.acked}, retried {stats.retried}, dead {stats.dead}, "
        f"handed back {stats.released}, lease lost {stats.lease_lost}"
        + (f", timed out {stats.timeouts}" if stats.timeouts else "")
        + (f", claims refused by a limit {stats.throttled}" if stats.throttled else "")
    )
    if stats.abandoned_limit_reached:
        click.echo(
            f"shardq work: stopped after {stats.abandoned} handler threads were left running past their "
            "timeouts; restart the worker",
            err=True,
        )
        ctx.exit(1)


@cli.command("reap")
@click.option("--once", is_flag=True, help="One pass over every bucket, then exit.")
@click.option("--interval", type=float, default=5.0, show_default=True, metavar="SECONDS", help="Pause between passes.")
@click.option(
    "--statement-timeout",
    type=float,
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="The server cancels a statement after this long (the pass is retried with backoff); 0: no limit.",
)
@click.pass_context
def reap(ctx, once, interval, statement_timeout) -> None:
    """Return expired leases to their queues (or to the dead letters)."""
    import signal

    client = client_from(ctx)
    reaper = client.reaper(interval=interval, statement_timeout=statement_timeout or None)
    if once:
        result = reaper.run_once()
        click.echo(f"reaped {result.reaped}: {result.retried} back to ready, {result.dead} dead")
        return
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    reaper.run_forever(stop)


@cli.command("cancel")
@click.argument("ids", nargs=-1, required=True)
@click.pass_context
def cancel(ctx, ids) -> None:
    """Cancel tasks by ID (ready, scheduled, waiting or running: a running task's outcome is then ignored)."""
    result = client_from(ctx).cancel(*ids)
    message = f"cancelled {len(result.cancelled)}"
    if result.not_found:
        message += f" (not found: {', '.join(result.not_found)})"
    click.echo(message)
    if result.not_found and not result.cancelled:
        from shardq.errors import TaskNotFound

        raise TaskNotFound(f"no task cancelled; not found: {', '.join(result.not_found)}")
