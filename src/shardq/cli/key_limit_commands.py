"""`shardq queue key-limit` and `shardq queue key-limits`: limits per concurrency key
(shardq.lifecycle.key_limits)."""

from __future__ import annotations

import json

import click

from shardq.cli.group import client_from
from shardq.cli.queue_settings_commands import queue


@queue.command("key-limit")
@click.argument("name")
@click.argument("pattern")
@click.argument("limit", type=int, required=False)
@click.option("--remove", is_flag=True, help="Remove the limit for PATTERN.")
@click.pass_context
def key_limit(ctx, name, pattern, limit, remove) -> None:
    """At most LIMIT live tasks of queue NAME per concurrency key matching PATTERN (a key, or a
    prefix followed by *), across every worker; --remove takes the limit away."""
    from shardq.errors import InvalidInput
    from shardq.lifecycle import key_limits

    if remove == (limit is not None):
        raise InvalidInput("give a LIMIT or --remove")
    key_limits.pattern(pattern)  # bad input: refused before anything connects
    if remove:
        found = client_from(ctx).remove_key_limit(name, pattern)
        click.echo(f"removed the limit for {pattern}" if found else f"no limit for {pattern}")
        return
    key_limits.limit_value(limit)
    client_from(ctx).set_key_limit(name, pattern, limit)
    click.echo(f"{name}: at most {limit} per key {pattern}")


@queue.command("key-limits")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def key_limits_show(ctx, name, as_json) -> None:
    """The limits per concurrency key of queue NAME."""
    limits = client_from(ctx).key_limits(name)
    if as_json:
        click.echo(json.dumps(limits))
        return
    for pattern, limit in limits.items():
        click.echo(f"{pattern}\t{limit}")
