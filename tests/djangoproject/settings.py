"""A Django project for tests/test_django.py: shardq.contrib.django and one app, ``shop``, whose
tasks.py declares a task. DATABASES points at a placeholder: the tests' ``django_db_setup`` fills
in the embedded PostgreSQL's database before the first connection."""

SECRET_KEY = "tests-only"
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["shardq.contrib.django", "tests.djangoproject.shop"]
DATABASES = {"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "set_by_the_tests",
                         "USER": "postgres", "HOST": "127.0.0.1", "PORT": "5432"}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
SHARDQ = {"DATABASE": "default", "BUCKETS": 4}
