"""`shardq db …` (embedded server) and `shardq migrate`."""

from __future__ import annotations

import click

from shardq.cli.group import cli, dsn_from


@cli.group("db")
def db() -> None:
    """Manage the embedded PostgreSQL (used when no DSN is configured)."""


@db.command("start")
def db_start() -> None:
    """Start the embedded server (no-op if it runs) and print its URL."""
    from shardq.sessions.embedded import EmbeddedServer

    click.echo(EmbeddedServer().start())


@db.command("stop")
def db_stop() -> None:
    """Stop the embedded server."""
    from shardq.sessions.embedded import EmbeddedServer

    click.echo("stopped" if EmbeddedServer().stop() else "not running")


@db.command("status")
def db_status() -> None:
    """Say whether the embedded server runs, where its data is and its URL."""
    from shardq.sessions.embedded import EmbeddedServer

    status = EmbeddedServer().status()
    click.echo(f"{'running' if status.running else 'stopped'}  data={status.data_dir}  url={status.url or '-'}")


@db.command("url")
def db_url() -> None:
    """Print the embedded server's URL (starting it if needed)."""
    from shardq.sessions.embedded import EmbeddedServer

    click.echo(EmbeddedServer().start())


@cli.command("migrate")
@click.option(
    "--buckets", type=int, default=16, show_default=True, help="Bucket count when the tasks table is created."
)
@click.option("--down", is_flag=True, help="Revert every shardq migration (drops the tables).")
@click.pass_context
def migrate(ctx: click.Context, buckets: int, down: bool) -> None:
    """Create or upgrade shardq's tables (idempotent)."""
    from shardq.migrations import apply as migrations

    dsn = dsn_from(ctx)
    result = migrations.downgrade(dsn) if down else migrations.upgrade(dsn, buckets=buckets)
    if down:
        click.echo(f"reverted {result.before or 'nothing'} -> base")
    elif result.changed:
        click.echo(f"migrated {result.before or 'empty'} -> {result.after} on {result.dialect} ({buckets} buckets)")
    else:
        click.echo(f"already at {result.after} on {result.dialect}")
    if (
        result.buckets_ignored
        and not down
        and ctx.get_parameter_source("buckets") is click.core.ParameterSource.COMMANDLINE
    ):
        click.echo(
            "note: the tasks table already exists; use `shardq buckets resize N` to change the bucket count", err=True
        )


@cli.command("doctor")
@click.option(
    "--dsn",
    "dsn_option",
    default=None,
    metavar="URL",
    help="The database to check (default: the global --dsn, $SHARDQ_DSN, else the embedded PostgreSQL).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the checklist as JSON.")
@click.pass_context
def doctor(ctx: click.Context, dsn_option: str | None, as_json: bool) -> None:
    """Check a database before first use: engine and version, session, schema, layout,
    privileges, and the plan of every statement shardq sends. Writes nothing. Exit 0 when
    everything holds, 1 with one line per problem."""
    import json

    from shardq.admin.doctor import diagnose
    from shardq.sessions.dsn import resolve_dsn

    diagnosis = diagnose(resolve_dsn(dsn_option) if dsn_option else dsn_from(ctx))
    if as_json:
        click.echo(json.dumps(diagnosis.as_dict(), indent=2, default=str))
    else:
        for line in diagnosis.lines():
            click.echo(line)
    if not diagnosis.ok:
        ctx.exit(1)
