# Moving an existing AutoField (or BigAutoField) table to snowflake ids.
#
# 1. In models.py: id = SnowflakeAutoField(primary_key=True) (or let the app's
#    default_auto_field name it).
# 2. `manage.py makemigrations` writes an AlterField. Django's PostgreSQL
#    schema editor would run only ALTER COLUMN "id" TYPE bigint for it
#    (DatabaseSchemaEditor._alter_column_type_sql in
#    django/db/backends/postgresql/schema.py, Django 5.2.19: the column type
#    suffix is not applied when a field is altered), leaving the identity in
#    place. So wrap it, as below: Django's state takes the AlterField, the
#    database gets snowflake_convert(), which widens the key and every foreign
#    key column pointing at it to bigint, drops the identity and sets
#    DEFAULT snowflake_nextval(), in the migration's transaction.
#    SnowflakeConvert (shop/convert.py) fails the migration if it would widen
#    a column not named in widens=[...]: the server's WARNING about it never
#    reaches `migrate`.
# 3. `manage.py migrate`. On a database where snowflake_convert('shop_ticket')
#    was already run by hand, the call finds nothing to do (it returns no
#    statements); on a new database (tests, a new install) it converts the
#    table that 0003 just created.
from django.db import migrations

import shop.fields
from shop.convert import SnowflakeConvert


class Migration(migrations.Migration):

    dependencies = [
        ("shop", "0003_ticket"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                # The key, and the foreign key pointing at it, become bigint.
                SnowflakeConvert(
                    "shop_ticket",
                    widens=["public.shop_ticket.id", "public.shop_ticketnote.ticket_id"],
                ),
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="ticket",
                    name="id",
                    field=shop.fields.SnowflakeAutoField(primary_key=True, serialize=False),
                ),
            ],
        ),
    ]
