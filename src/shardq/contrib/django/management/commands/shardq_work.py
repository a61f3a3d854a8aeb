"""``manage.py shardq_work``: run the project's tasks (every tasks.py of the installed apps)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from shardq.contrib.django import app


class Command(BaseCommand):
    help = "Run the project's shardq tasks until stopped (SIGTERM or Ctrl-C: a graceful stop)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            help="a queue to work on (repeatable; default: every queue of the project's tasks)",
        )
        parser.add_argument("--concurrency", type=int, default=None, help="tasks run at once (shardq's default)")
        parser.add_argument("--until-empty", action="store_true", help="stop once nothing is due or in flight")

    def handle(self, *args: Any, **options: Any) -> None:
        queues = options["queues"] or app.queues()
        if not queues:
            raise CommandError("no tasks declared: put @app.task functions in an installed app's tasks.py")
        settings = {"concurrency": options["concurrency"]} if options["concurrency"] else {}
        totals = app.client.work(
            queues,
            app,
            until_empty=options["until_empty"],
            install_signal_handlers=not options["until_empty"],
            **settings,
        )
        self.stdout.write(f"acked {totals.acked}, retried {totals.retried}, dead {totals.dead}")
