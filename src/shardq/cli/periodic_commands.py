"""`shardq periodic list`: an app's schedules with their last and next slot."""

from __future__ import annotations

import json

import click

from shardq.cli.group import cli, client_from


@cli.group("periodic")
def periodic() -> None:
    """Periodic tasks declared with @app.periodic (scheduled by every `shardq work --app`)."""


@periodic.command("list")
@click.option("--app", "app_spec", required=True, metavar="MODULE:APP", help="The shardq.App declaring the schedules.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per schedule, in a list.")
@click.pass_context
def periodic_list(ctx, app_spec, as_json) -> None:
    """Each schedule: its task and queue, when it runs, the last slot taken and the next one."""
    from shardq.app.application import load_app

    views = client_from(ctx).schedules(list(load_app(app_spec).schedules.values()))
    if as_json:
        click.echo(json.dumps([v.as_json() for v in views], indent=1))
        return
    if not views:
        click.echo("no periodic tasks declared")
    for v in views:
        last = v.last_slot.isoformat() if v.last_slot else "never"
        click.echo(f"{v.name}  task {v.task} on {v.queue}  {v.when}  last {last}  next {v.next_slot.isoformat()}")
