"""`shardq signal`: send a signal to a durable task's ``ctx.wait_for`` (docs/durable.md)."""

from __future__ import annotations

import json

import click

from shardq.cli.group import cli, client_from


@cli.command("signal")
@click.argument("task_id")
@click.argument("name")
@click.argument("payload", required=False)
@click.option(
    "--key", default=None, metavar="KEY", help="Idempotency key: sending again with the same key sends nothing twice."
)
@click.pass_context
def signal(ctx, task_id, name, payload, key) -> None:
    """Send signal NAME with an optional JSON PAYLOAD (default null) to the live task TASK_ID."""
    from shardq.errors import InvalidInput

    value = None
    if payload is not None:
        try:
            value = json.loads(payload)
        except ValueError as exc:
            raise InvalidInput(f"the payload is not JSON: {exc}") from None
    sent = client_from(ctx).signal(task_id, name, value, key=key)
    click.echo(
        f"signal {name!r} sent to task {task_id}"
        if sent
        else f"signal {name!r} with that key was already sent to task {task_id}"
    )
