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

# The snowflake field, for the many-to-many link tables Django makes itself:
# their keys come from this setting, not from the app's default_auto_field
# (see shop/fields.py). The field leaves Django's own django_migrations table
# its identity, and gives a link table the key of the model that owns it, so
# the link tables of Django's own apps (auth_group_permissions, ...) keep
# theirs. Each app still names the field in its AppConfig (shop/apps.py),
# where `startapp` writes default_auto_field, which wins over this setting.
DEFAULT_AUTO_FIELD = "shop.fields.SnowflakeAutoField"
