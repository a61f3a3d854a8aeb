"""A real Django project (tests/djangoproject) on the embedded PostgreSQL, through pytest-django:
tasks.py of installed apps found at start-up, defer() inside transaction.atomic() on Django's own
psycopg 3 connection (rollback: no task; commit: it runs), manage.py shardq_migrate and
shardq_work."""

from __future__ import annotations

import io
import uuid

import psycopg
import pytest

pytest.importorskip("pytest_django")

from django.conf import settings
from django.core.management import call_command
from django.db import connections, transaction

from shardq.contrib.django import app, dsn_from_settings
from shardq.db import Dsn, Session

from .djangoproject.shop import tasks as shop_tasks
from .djangoproject.shop.models import Order


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
    app.close()
    with django_db_blocker.unblock():
        connections.close_all()
    with Session(Dsn.parse(admin_url)) as admin:
        admin.execute_raw(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _tasks_seen_by_another_connection() -> int:
    with psycopg.connect(dsn_from_settings(), autocommit=True) as other:
        return other.execute("SELECT count(*) FROM shardq_tasks").fetchone()[0]


def test_the_tasks_module_of_each_installed_app_is_found_at_start_up():
    assert "shop.ship" in app.tasks and app.queues() == ["shop"]


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_atomic_block_leaves_no_task_and_a_committed_one_runs():
    shop_tasks.shipped.clear()
    with pytest.raises(RuntimeError), transaction.atomic():
        Order.objects.create(email="a@example.com")
        shop_tasks.ship.defer(order_id=1)
        raise RuntimeError("the view failed")
    assert _tasks_seen_by_another_connection() == 0

    with transaction.atomic():
        order = Order.objects.create(email="b@example.com")
        assert shop_tasks.ship.defer(order_id=order.pk)
        assert _tasks_seen_by_another_connection() == 0  # written on Django's connection, not committed yet
    assert _tasks_seen_by_another_connection() == 1

    out = io.StringIO()
    call_command("shardq_work", "--until-empty", stdout=out)
    assert shop_tasks.shipped == [order.pk]
    assert out.getvalue().strip() == "acked 1, retried 0, dead 0"


@pytest.mark.django_db(transaction=True)
def test_outside_an_atomic_block_defer_commits_at_once():
    task_id = shop_tasks.ship.defer(order_id=7)
    assert task_id and _tasks_seen_by_another_connection() == 1
    call_command("shardq_work", "--until-empty", "--queue", "shop", stdout=io.StringIO())
    assert _tasks_seen_by_another_connection() == 0
