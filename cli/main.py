"""Entry point of the ``shardq`` console script: the group plus every command module."""

from __future__ import annotations

from . import admin_commands, db_commands, queue_commands, queue_settings_commands  # noqa: F401  (register commands)
from .app import cli


def main() -> None:
    cli(prog_name="shardq")


if __name__ == "__main__":
    main()
