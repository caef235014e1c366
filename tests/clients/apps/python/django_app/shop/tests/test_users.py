"""auth_user and snowflake ids.

With snowproj.settings (django.contrib.auth's own User, a 32-bit AutoField
that no setting changes: AuthConfig.default_auto_field = AutoField in
django/contrib/auth/apps.py), snowflake_convert('auth_user') leaves a user
table Django cannot look up by id. With snowproj.settings_customuser the user
model is the project's own and its id is a SnowflakeAutoField from the start.
"""
import unittest
from unittest import mock

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection
from django.db.utils import load_backend
from django.test import TestCase

from shop.fields import SnowflakeAutoField
from shop.models import Author, Post

from .helpers import SNOWFLAKE_KEY, column_facts, snowflake_convert

stock_user = settings.AUTH_USER_MODEL == "auth.User"


@unittest.skipUnless(stock_user, "needs django.contrib.auth's User (snowproj.settings)")
class ConvertedAuthUserTests(TestCase):
    def setUp(self):
        # In the test's transaction: rolled back after each test.
        statements = snowflake_convert("auth_user")
        self.assertIn("ALTER TABLE public.auth_user ALTER COLUMN id TYPE bigint", " ".join(statements))
        self.User = get_user_model()

    def test_stock_django_cannot_get_a_converted_user_by_id(self):
        user = self.User.objects.create_user("new-user")
        self.assertGreater(user.pk, 2**31 - 1)
        self.assertEqual(self.User._meta.pk.get_internal_type(), "AutoField")
        with self.assertRaises(self.User.DoesNotExist):
            self.User.objects.get(pk=user.pk)
        # The row is there: other lookups find it.
        self.assertEqual(self.User.objects.get(username="new-user").pk, user.pk)
        # Post.created_by was widened by snowflake_convert (a foreign key to
        # auth_user), so storing the id works; following it back by id does not.
        post = Post.objects.create(author=Author.objects.create(name="a"), title="t", created_by=user)
        self.assertEqual(Post.objects.get(pk=post.pk).created_by_id, user.pk)
        with self.assertRaises(self.User.DoesNotExist):
            Post.objects.get(pk=post.pk).created_by

    def test_convert_again_widens_a_later_foreign_key(self):
        # Django still thinks auth_user.id is integer, so a migration that adds
        # a ForeignKey to User later makes an integer column, as here.
        with connection.cursor() as cur:
            cur.execute(
                "CREATE TABLE shop_later (id bigint PRIMARY KEY,"
                " user_id integer REFERENCES auth_user (id))"
            )
        self.assertEqual(column_facts("shop_later", "user_id")["type"], "integer")
        statements = snowflake_convert("auth_user")
        self.assertIn("ALTER TABLE public.shop_later ALTER COLUMN user_id TYPE bigint", " ".join(statements))
        self.assertEqual(column_facts("shop_later", "user_id")["type"], "bigint")

    def test_stop_gap_backend_widens_autofield_lookups(self):
        # ENGINE "snowproj.pgbackend" (snowproj/pgbackend/base.py): the same
        # lookups with its integer_field_ranges.
        backend = load_backend("snowproj.pgbackend")
        ranges = backend.DatabaseWrapper.ops_class.integer_field_ranges
        self.assertEqual(ranges["AutoField"], (-(2**63), 2**63 - 1))
        user = self.User.objects.create_user("new-user")
        with mock.patch.object(connection.ops, "integer_field_ranges", ranges):
            self.assertEqual(self.User.objects.get(pk=user.pk).username, "new-user")
            post = Post.objects.create(author=Author.objects.create(name="a"), title="t", created_by=user)
            self.assertEqual(Post.objects.get(pk=post.pk).created_by, user)
            self.assertEqual(list(user.post_set.all()), [post])


@unittest.skipIf(stock_user, "needs the custom user model (snowproj.settings_customuser)")
class CustomUserTests(TestCase):
    def test_user_ids_are_snowflake_ids(self):
        User = get_user_model()
        self.assertEqual(User._meta.label, "accounts.User")
        self.assertIsInstance(User._meta.pk, SnowflakeAutoField)
        self.assertEqual(column_facts(User._meta.db_table), SNOWFLAKE_KEY)
        self.assertEqual(column_facts("shop_post", "created_by_id")["type"], "bigint")
        user = User.objects.create_user("new-user")
        self.assertGreater(user.pk, 2**31 - 1)
        self.assertEqual(User.objects.get(pk=user.pk).username, "new-user")
        post = Post.objects.create(author=Author.objects.create(name="a"), title="t", created_by=user)
        self.assertEqual(Post.objects.get(pk=post.pk).created_by, user)
        users = User.objects.bulk_create([User(username=f"u{i}") for i in range(5)])
        self.assertEqual(
            {u.pk: u.username for u in users},
            dict(User.objects.filter(username__startswith="u").values_list("pk", "username")),
        )

    def test_the_users_link_tables_have_snowflake_keys(self):
        # Made by Django from the user model's ManyToManyFields, their keys
        # from DEFAULT_AUTO_FIELD (see shop/fields.py).
        for table in ("accounts_user_groups", "accounts_user_user_permissions"):
            with self.subTest(table=table):
                self.assertEqual(column_facts(table), SNOWFLAKE_KEY)
        User = get_user_model()
        user = User.objects.create_user("grouped")
        user.groups.add(Group.objects.create(name="staff"))
        link = User.groups.through.objects.get(user=user)
        self.assertGreater(link.pk, 2**31 - 1)
