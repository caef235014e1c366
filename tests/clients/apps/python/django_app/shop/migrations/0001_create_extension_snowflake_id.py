# The first migration of the app: every table with a SnowflakeAutoField comes
# after it. CreateExtension (django/contrib/postgres/operations.py, Django
# 5.2.19) looks in pg_extension first and runs CREATE EXTENSION IF NOT EXISTS
# "snowflake_id" only where it is missing, so it is a no-op on a database that
# has the extension and it runs as the migrating role: a role with CREATE on
# the database (its owner: `manage.py test` creates test_<name> as PGUSER) may
# create a trusted extension. The server must preload the library
# (shared_preload_libraries) and have snowflake_id.worker_id set.
# Migrations of other apps whose tables use SnowflakeAutoField must depend on
# ("shop", "0001_create_extension_snowflake_id").
from django.contrib.postgres.operations import CreateExtension
from django.db import migrations


class Migration(migrations.Migration):
    initial = True
    dependencies = []
    operations = [CreateExtension("snowflake_id")]
