"""Settings of the snowflake_id recipe project (Django 5.2).

The connection comes from the libpq variables PGHOST, PGPORT, PGUSER,
PGPASSWORD and PGDATABASE. `manage.py test` creates test_<PGDATABASE> as
PGUSER (which needs CREATEDB) and the extension inside it through
shop/migrations/0001_create_extension_snowflake_id.py.

This is the project of an application that started on django.contrib.auth's
own User (auth_user, a 32-bit AutoField). settings_customuser.py is the same
project started with a custom user model.
"""
import os

SECRET_KEY = "recipe-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = []
USE_TZ = True

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "shop",
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "HOST": os.environ.get("PGHOST", ""),
        "PORT": os.environ.get("PGPORT", ""),
        "USER": os.environ.get("PGUSER", ""),
        "PASSWORD": os.environ.get("PGPASSWORD", ""),
        "NAME": os.environ.get("PGDATABASE", "appdb"),
    }
}

# Not the snowflake field here: DEFAULT_AUTO_FIELD also gives Django's own
# django_migrations table its id (MigrationRecorder.Migration in
# django/db/migrations/recorder.py has no app config), and `migrate` creates
# that table before it runs any migration, so on a new database (the test
# database included) CREATE TABLE "django_migrations" (... DEFAULT
# snowflake_nextval()) would fail before the CreateExtension migration could
# run. Each app names the snowflake field in its AppConfig instead
# (shop/apps.py), where `startapp` already writes default_auto_field.
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
