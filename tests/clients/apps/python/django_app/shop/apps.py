from django.apps import AppConfig


class ShopConfig(AppConfig):
    name = "shop"
    # Every model of this app without an explicit primary key gets a snowflake
    # id. `startapp` writes "django.db.models.BigAutoField" here; an app's
    # default_auto_field wins over settings.DEFAULT_AUTO_FIELD.
    default_auto_field = "shop.fields.SnowflakeAutoField"
