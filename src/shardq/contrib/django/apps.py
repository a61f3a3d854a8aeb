"""The Django application config: imports every installed app's ``tasks`` module at start-up."""

from __future__ import annotations

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class ShardqConfig(AppConfig):
    name = "shardq.contrib.django"
    label = "shardq"
    verbose_name = "shardq"

    def ready(self) -> None:
        autodiscover_modules("tasks")
