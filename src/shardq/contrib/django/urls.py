"""The dashboard's URLs, to include under any prefix::

    path("queue-admin/", include("shardq.contrib.django.urls"))

See :mod:`shardq.contrib.django.dashboard`."""

from __future__ import annotations

from django.urls import re_path

from shardq.contrib.django.dashboard import dashboard_view

app_name = "shardq"
urlpatterns = [re_path(r"^(?P<rest>.*)$", dashboard_view, name="dashboard")]
