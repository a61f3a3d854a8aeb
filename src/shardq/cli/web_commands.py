"""`shardq web`: the browser dashboard."""

from __future__ import annotations

import click

from shardq.cli.group import cli, client_from


@cli.command("web")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    metavar="ADDRESS",
    help="Address to listen on. Anything but loopback needs an explicit --token.",
)
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True, help="0: any free port.")
@click.option(
    "--token",
    envvar="SHARDQ_WEB_TOKEN",
    default=None,
    metavar="TOKEN",
    help="The token every request must carry, at least 16 characters (default: $SHARDQ_WEB_TOKEN, "
    "else one is generated and printed).",
)
@click.option(
    "--read-token",
    envvar="SHARDQ_WEB_READ_TOKEN",
    default=None,
    metavar="TOKEN",
    help="A second token, at least 16 characters, that sees everything and changes nothing "
    "(default: $SHARDQ_WEB_READ_TOKEN, else none).",
)
@click.option(
    "--app",
    "app_spec",
    default=None,
    metavar="MODULE:APP",
    help="The shardq.App whose periodic schedules the Periodic page lists (optional).",
)
@click.option(
    "--refresh",
    type=click.FloatRange(min=0.2),
    default=2.0,
    show_default=True,
    metavar="SECONDS",
    help="How often the overview polls for new numbers.",
)
@click.option(
    "--bucket-cap",
    type=int,
    default=10_000,
    show_default=True,
    metavar="N",
    help="Rows counted at most per queue, bucket and state (as for `shardq stats`).",
)
@click.pass_context
def web(ctx, host, port, token, read_token, app_spec, refresh, bucket_cap) -> None:
    """Serve the web dashboard (queues, per-bucket depth, tasks by state, workers, dead letters,
    audit log; pause, requeue, purge, cancel, run now, re-prioritise) until Ctrl-C. Every request
    needs the token: open the printed URL and log in with it, or send `Authorization: Bearer TOKEN`.
    A --read-token session sees everything and changes nothing."""
    from shardq import web as web_module
    from shardq.admin.stats import StatsOptions
    from shardq.app.application import load_app

    def started(info) -> None:
        click.echo(f"shardq web: serving {info.url}")
        if info.note:
            click.echo(f"shardq web: {info.note}")
        if info.generated:
            click.echo(f"shardq web: token (shown once): {info.token}")

    schedules = list(load_app(app_spec).schedules.values()) if app_spec else None
    web_module.serve(
        client_from(ctx),
        host=host,
        port=port,
        token=token,
        read_token=read_token,
        refresh_seconds=refresh,
        schedules=schedules,
        stats_options=StatsOptions(bucket_cap=bucket_cap),
        on_start=started,
    )
