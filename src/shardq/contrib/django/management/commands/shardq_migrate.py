"""``manage.py shardq_migrate``: create or upgrade shardq's tables in the project's database."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from shardq.contrib.django.tasks import dsn_from_settings, settings_value
from shardq.migrations import apply as migrate
from shardq.sessions.dsn import Dsn


class Command(BaseCommand):
    help = "Create or upgrade shardq's tables (idempotent), in SHARDQ['DSN'] or the DATABASES entry."

    def handle(self, *args: Any, **options: Any) -> None:
        buckets = int(settings_value("BUCKETS"))
        result = migrate.upgrade(Dsn.parse(dsn_from_settings()), buckets=buckets)
        if result.changed:
            self.stdout.write(f"migrated {result.before or 'empty'} -> {result.after} on {result.dialect}")
        else:
            self.stdout.write(f"already at {result.after} on {result.dialect}")
