"""shardq in a Django project: ``INSTALLED_APPS += ["shardq.contrib.django"]``.

::

    # settings.py (every key optional)
    SHARDQ = {
        "DSN": None,           # a URL or key=value string; None: the server and database of DATABASE
        "DATABASE": "default", # the alias whose transactions defer() joins
        "BUCKETS": 16,         # shardq_migrate's bucket count when it creates the tasks table
    }

    # myapp/tasks.py: found in every installed app at start-up
    from shardq.contrib.django import app

    @app.task(queue="emails")
    def send_welcome(user_id: int) -> None: ...

    # a view
    with transaction.atomic():
        user = User.objects.create(...)
        send_welcome.defer(user_id=user.pk)    # on Django's own connection, in this transaction

    $ python manage.py shardq_migrate          # shardq's tables, beside Django's
    $ python manage.py shardq_work             # every queue of the project's tasks

Guarantees
    * :data:`app` is a :class:`shardq.App` whose DSN is read from ``SHARDQ`` (or the
      ``DATABASES`` entry) on first use, so importing a ``tasks.py`` never connects.
    * ``defer`` / ``defer_many`` inside ``transaction.atomic()`` (on ``SHARDQ["DATABASE"]``) write
      on that Django connection (psycopg 3): a rollback leaves no task, a commit makes it
      runnable. Outside an atomic block they go through shardq's own connection and commit at
      once. An explicit ``configure(connection=…)`` wins.
    * ``tasks`` modules of every installed app are imported when Django starts (``ready()``), so the
      worker knows every task.

Does not
    * join atomic blocks from async views (``defer_async`` uses its own connection: Django runs
      async ORM calls on other threads) or on psycopg2 (``connection=`` needs psycopg 3);

The dashboard mounts in the project's URLs behind Django's staff login
(``path("queue-admin/", include("shardq.contrib.django.urls"))``; staff read, the permission
``shardq.operate_dashboard`` acts): see :mod:`shardq.contrib.django.dashboard`.
"""

from __future__ import annotations

from shardq.contrib.django.tasks import DjangoApp, dsn_from_settings, settings_value

#: The project's :class:`shardq.App`: declare tasks on it in each app's ``tasks.py``.
app = DjangoApp()

__all__ = ["DjangoApp", "app", "dsn_from_settings", "settings_value"]
