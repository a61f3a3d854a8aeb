"""A Django project for tests/contrib/test_django.py: shardq.contrib.django and one app, ``shop``, whose
tasks.py declares a task; Django's auth and sessions, with shardq's dashboard at /queue-admin/
behind the staff login (tests/test_django_dashboard.py). DATABASES points at a placeholder: the
tests' ``django_db_setup`` fills in the embedded PostgreSQL's database before the first connection."""

SECRET_KEY = "tests-only"
DEBUG = False
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "shardq.contrib.django",
    "tests.djangoproject.shop",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "tests.djangoproject.urls"
LOGIN_URL = "/accounts/login/"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "set_by_the_tests",
        "USER": "postgres",
        "HOST": "127.0.0.1",
        "PORT": "5432",
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
SHARDQ = {"DATABASE": "default", "BUCKETS": 4}
