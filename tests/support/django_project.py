"""What the Django tests share: the project's database on the embedded PostgreSQL (the
``django_db_setup`` fixture a test module imports) and its users."""

from __future__ import annotations

import io
import uuid

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connections

from shardq.contrib.django import app, dashboard
from shardq.sessions.dsn import Dsn
from shardq.sessions.session import Session


@pytest.fixture(scope="module")
def django_db_setup(django_db_blocker, pg_server):
    """An empty database of the embedded server for the project: Django's own tables by its
    migrate, shardq's by shardq_migrate."""
    admin_url = pg_server.url("postgres")
    name = f"django_{uuid.uuid4().hex[:8]}"
    with Session(Dsn.parse(admin_url)) as admin:
        admin.execute_raw(f'CREATE DATABASE "{name}"')  # a name made here from hex digits
    params = Dsn.parse(admin_url).params()
    settings.DATABASES["default"].update(NAME=name, HOST=params["host"], PORT=params["port"], USER=params["user"])
    with django_db_blocker.unblock():
        call_command("migrate", run_syncdb=True, verbosity=0)
        first, again = io.StringIO(), io.StringIO()
        call_command("shardq_migrate", stdout=first)
        call_command("shardq_migrate", stdout=again)
    assert first.getvalue().startswith("migrated empty -> ") and again.getvalue().startswith("already at ")
    yield
    # The next module makes a database of its own: forget this one's DSN and the dashboard made on it.
    app.close()
    app._configured = False
    dashboard._apps.clear()
    with django_db_blocker.unblock():
        connections.close_all()
    with Session(Dsn.parse(admin_url)) as admin:
        admin.execute_raw(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def make_user(name: str, *, staff: bool, operator: bool = False):
    """A Django user; ``operator`` grants ``shardq.operate_dashboard``."""
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user(name, password="unused-in-tests", is_staff=staff)
    if operator:
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label="shardq", codename="operate_dashboard")
        )
    return user
