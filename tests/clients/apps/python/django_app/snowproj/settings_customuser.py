"""The same project started with a custom user model whose id is a snowflake
id: the clean way to have snowflake user ids in Django. AUTH_USER_MODEL must be
set before the first `migrate` of a project (Django's documentation:
"Changing to a custom user model mid-project").

    python manage.py test --settings=snowproj.settings_customuser
"""
from .settings import *  # noqa: F401,F403
from .settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "accounts"]
AUTH_USER_MODEL = "accounts.User"
