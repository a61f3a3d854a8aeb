"""Entry point of the ``shardq`` console script: the group plus every command module."""

from __future__ import annotations

from shardq.cli import (  # noqa: F401  (register commands)
    admin_commands,
    db_commands,
    demo_commands,
    durable_commands,
    history_commands,
    key_limit_commands,
    periodic_commands,
    queue_commands,
    queue_settings_commands,
    spark_commands,
    web_commands,
    workflow_commands,
)
from shardq.cli.group import cli


def main() -> None:
    cli(prog_name="shardq")


if __name__ == "__main__":
    main()
