"""The permission that lets a staff user change things from the dashboard.

Django permissions hang on a model, so :class:`Dashboard` is a model without a table
(``managed = False``; no migration, nothing is created but its content type and permission, by
Django's own ``migrate``). It has no default add/change/delete/view permissions, only
``shardq.operate_dashboard`` (see :mod:`shardq.contrib.django.dashboard`).
"""

from __future__ import annotations

from django.db import models


class Dashboard(models.Model):
    class Meta:
        managed = False
        default_permissions = ()
        permissions = (("operate_dashboard", "Can pause, requeue, cancel and change queues from the shardq dashboard"),)
