from django.contrib.auth.models import AbstractUser


class User(AbstractUser):
    """AUTH_USER_MODEL of snowproj.settings_customuser: its id, and the ids of
    its groups/permissions link tables, are SnowflakeAutoField (from
    AccountsConfig.default_auto_field)."""
