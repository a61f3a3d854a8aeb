"""A real Django project (tests/djangoproject) on the embedded PostgreSQL, through pytest-django:
tasks.py of installed apps found at start-up, defer() inside transaction.atomic() on Django's own
psycopg 3 connection (rollback: no task; commit: it runs), manage.py shardq_migrate and
shardq_work, and the dashboard in the project's URLs behind Django's staff login (Django's test
client)."""

from __future__ import annotations

import io
import re
from urllib.parse import quote, urlencode

import psycopg
import pytest

pytest.importorskip("pytest_django")

from django.core.management import call_command
from django.db import transaction

from shardq.contrib.django import app
from shardq.contrib.django.tasks import dsn_from_settings
from tests.djangoproject.shop import tasks as shop_tasks
from tests.djangoproject.shop.models import Order
from tests.support.django_project import django_db_setup, make_user  # noqa: F401 - the fixture, for this module
from tests.support.probes import count_tasks_on


def _tasks_seen_by_another_connection() -> int:
    with psycopg.connect(dsn_from_settings(), autocommit=True) as other:
        return count_tasks_on(other)


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


# -- the dashboard in the project's URLs, behind Django's staff login ----------------------------
DASHBOARD = "/queue-admin/"


@pytest.fixture
def http():
    """Django's test client (the suite's own ``client`` fixture is shardq's)."""
    from django.test import Client as DjangoClient

    return DjangoClient()


def _submit(http, path: str, form: dict[str, str]):
    """POST ``form`` as a browser sends the dashboard's forms (urlencoded, not the test client's multipart)."""
    return http.post(path, urlencode(form), content_type="application/x-www-form-urlencoded")


def _queue_page(http, queue: str = "mail") -> str:
    """The page of ``queue`` (made with default settings first), whose forms carry the CSRF token."""
    app.client.set_queue(queue)
    page = http.get(DASHBOARD + "queues/" + queue)
    assert page.status_code == 200
    return page.text


def _csrf(page: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', page).group(1)


@pytest.mark.django_db(transaction=True)
def test_the_dashboard_sends_anyone_but_staff_to_the_login_page(http):
    for path in (DASHBOARD, DASHBOARD + "api/queues", DASHBOARD + "queues/shop"):
        response = http.get(path)
        assert response.status_code == 302 and response["Location"] == f"/accounts/login/?next={quote(path)}", path
    http.force_login(make_user("shopper", staff=False))
    response = http.get(DASHBOARD)
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert http.post(DASHBOARD + "api/queues/mail/pause").status_code == 302


@pytest.mark.django_db(transaction=True)
def test_a_staff_user_reads_the_dashboard_without_its_token_and_changes_nothing_without_the_permission(http):
    http.force_login(make_user("reader", staff=True))
    page = http.get(DASHBOARD)
    assert page.status_code == 200 and "<h1>Queues</h1>" in page.text and 'id="read-only"' in page.text
    assert 'src="/queue-admin/static/dashboard.js"' in page.text and 'id="token"' not in page.text
    assert http.get(DASHBOARD + "static/dashboard.js").status_code == 200
    assert http.get(DASHBOARD + "api/queues").json()["queues"] is not None
    assert http.get(DASHBOARD + "login")["Location"] == "/queue-admin/"  # no token form for staff
    assert 'id="pause-dequeue"' not in _queue_page(http)
    refused = _submit(http, DASHBOARD + "queues/mail/pause", {"csrf": "any", "what": "dequeue"})
    assert refused.status_code == 403 and "read-only" in refused.text  # refused before the CSRF check
    assert http.post(DASHBOARD + "api/queues/mail/pause").status_code == 403


@pytest.mark.django_db(transaction=True)
def test_a_staff_user_with_the_permission_acts_with_the_dashboards_csrf_token_and_is_named_in_the_audit(http):
    http.force_login(make_user("operator", staff=True, operator=True))
    page = http.get(DASHBOARD)
    assert 'id="read-only"' not in page.text
    assert _submit(http, DASHBOARD + "queues/mail/pause", {"what": "dequeue"}).status_code == 403  # no CSRF token
    assert _submit(http, DASHBOARD + "queues/mail/pause", {"what": "dequeue", "csrf": "forged"}).status_code == 403
    csrf = _csrf(_queue_page(http))
    paused = _submit(http, DASHBOARD + "queues/mail/pause", {"what": "dequeue", "csrf": csrf})
    assert paused.status_code == 303 and paused["Location"] == "/queue-admin/queues/mail?done=paused-dequeue"
    assert "paused: dequeue" in http.get(paused["Location"]).text
    resumed = _submit(http, DASHBOARD + "queues/mail/resume", {"csrf": csrf})
    assert resumed["Location"] == "/queue-admin/queues/mail?done=resumed-both"
    audit = http.get(DASHBOARD + "audit").text
    assert "Django user operator" in audit
    assert http.get(DASHBOARD, HTTP_AUTHORIZATION="Bearer anything").status_code == 200  # the header is ignored
