"""A stop-gap database backend for a project that already ran
snowflake_convert('auth_user') (or converted any other table whose model
field stays a 32-bit AutoField and cannot be changed).

Django 5.2 refuses integer lookups outside the range of the field's
*internal type* before any SQL is sent: django/db/models/lookups.py,
IntegerFieldOverflow.process_rhs(), registered on IntegerField (and so on
AutoField) for exact, gt, gte, lt and lte, raises EmptyResultSet for a value
above connection.ops.integer_field_ranges["AutoField"] = 2**31 - 1
(django/db/backends/base/operations.py). So User.objects.get(pk=<snowflake
id>) raises DoesNotExist without asking the database, and the same happens
in a ForeignKey's validation and a ModelChoiceField. (Read in Django 5.2.19.)

Setting ENGINE to "snowproj.pgbackend" gives AutoField the 64-bit range of the
bigint column that snowflake_convert left. It changes nothing else: AutoField
columns created by later migrations are still `integer`, and so is every new
ForeignKey to such a model (run snowflake_convert on the table again after
such a migration: it widens what is still missing). See docs/applications.md.
"""
from django.db.backends.postgresql import base, operations


class DatabaseOperations(operations.DatabaseOperations):
    integer_field_ranges = {
        **operations.DatabaseOperations.integer_field_ranges,
        "AutoField": (-9223372036854775808, 9223372036854775807),
    }


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
