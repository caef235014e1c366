import io

from django.core.management import call_command
from django.db import connection
from django.test import TestCase

from shop.fields import SnowflakeAutoField
from shop.models import Author, Post, Tag

from .helpers import SNOWFLAKE_KEY, column_facts


class ExtensionTests(TestCase):
    def test_created_by_the_migration_as_this_role(self):
        # The test database is new: the extension in it comes from
        # shop/migrations/0001, run as the test runner's role.
        with connection.cursor() as cur:
            cur.execute(
                "SELECT extowner::regrole::text = current_user FROM pg_extension"
                " WHERE extname = 'snowflake_id'"
            )
            self.assertEqual(cur.fetchone(), (True,))


class SchemaTests(TestCase):
    def test_default_auto_field_is_the_snowflake_field(self):
        self.assertIsInstance(Author._meta.pk, SnowflakeAutoField)
        self.assertIsInstance(Post._meta.pk, SnowflakeAutoField)

    def test_key_columns_default_to_snowflake_nextval_without_sequence(self):
        for table in ("shop_author", "shop_post"):
            with self.subTest(table=table):
                self.assertEqual(column_facts(table), SNOWFLAKE_KEY)

    def test_foreign_key_column_is_bigint_without_default(self):
        self.assertEqual(
            column_facts("shop_post", "author_id"),
            {"type": "bigint", "default": None, "identity": "", "sequence": None},
        )

    def test_link_tables_take_the_key_of_the_model_that_owns_them(self):
        # Post.tags' link table is a model Django makes; its key comes from
        # DEFAULT_AUTO_FIELD (shop/fields.py says why).
        self.assertEqual(column_facts("shop_post_tags"), SNOWFLAKE_KEY)
        self.assertIsInstance(Post.tags.through._meta.pk, SnowflakeAutoField)
        # Django's own: auth.Group's key is an AutoField, so its link table
        # keeps an identity, and so does django_migrations, made before the
        # extension is.
        for table in ("auth_group_permissions", "django_migrations"):
            with self.subTest(table=table):
                facts = column_facts(table)
                self.assertEqual((facts["default"], facts["identity"]), (None, "d"), facts)

    def test_a_child_models_link_table_takes_its_parents_key(self):
        # Article(Post): its key is post_ptr, a link to a snowflake key.
        self.assertEqual(column_facts("shop_article_editors"), SNOWFLAKE_KEY)

    def test_makemigrations_finds_nothing_to_write(self):
        # The setting names the snowflake field: no app of this project (nor
        # Django's own) gets a migration from it.
        call_command("makemigrations", "--check", "--dry-run", stdout=io.StringIO())

    def test_link_rows_get_snowflake_ids(self):
        post = Post.objects.create(author=Author.objects.create(name="a"), title="t")
        post.tags.add(*Tag.objects.bulk_create([Tag(name=f"tag {i}") for i in range(3)]))
        links = list(Post.tags.through.objects.filter(post=post).values_list("pk", flat=True))
        self.assertEqual(len(links), 3)
        self.assertTrue(all(pk > 2**31 for pk in links), links)

    def test_sqlmigrate_writes_the_link_tables_default(self):
        out = io.StringIO()
        call_command("sqlmigrate", "shop", "0005", stdout=out)
        self.assertIn(
            'CREATE TABLE "shop_post_tags" ("id" bigint NOT NULL PRIMARY KEY DEFAULT snowflake_nextval()',
            out.getvalue(),
        )
        self.assertNotIn("IDENTITY", out.getvalue())

    def test_sqlmigrate_writes_default_not_identity(self):
        out = io.StringIO()
        call_command("sqlmigrate", "shop", "0002", stdout=out)
        sql = out.getvalue()
        self.assertIn(
            '"id" bigint NOT NULL PRIMARY KEY DEFAULT snowflake_nextval()', sql
        )
        self.assertNotIn("IDENTITY", sql)


class BulkCreateTests(TestCase):
    def test_bulk_create_sets_every_pk_and_fks_store_them(self):
        authors = Author.objects.bulk_create(
            [Author(name=f"author {i}") for i in range(200)]
        )
        pks = [a.pk for a in authors]
        self.assertTrue(all(type(pk) is int for pk in pks), pks[:3])
        self.assertGreater(min(pks), 2**31)  # a snowflake id, not a sequence's
        self.assertEqual(len(set(pks)), len(pks))
        # Each object got its own row's id: re-read, the names match.
        by_pk = dict(Author.objects.values_list("pk", "name"))
        self.assertEqual({a.pk: a.name for a in authors}, by_pk)

        # Objects from bulk_create used as foreign keys: the right ids stored.
        posts = Post.objects.bulk_create(
            [Post(author=a, title=f"post by {a.name}") for a in authors]
        )
        self.assertTrue(all(type(p.pk) is int for p in posts))
        stored = dict(Post.objects.values_list("title", "author_id"))
        self.assertEqual(
            stored, {f"post by {a.name}": a.pk for a in authors}
        )
        self.assertEqual(
            Post.objects.select_related("author").get(pk=posts[7].pk).author.name,
            "author 7",
        )

    def test_save_and_get_round_trip(self):
        author = Author.objects.create(name="single")
        self.assertGreater(author.pk, 2**31)
        self.assertEqual(Author.objects.get(pk=author.pk).name, "single")
        post = Post.objects.create(author=author, title="t")
        self.assertEqual(Post.objects.get(pk=post.pk).author_id, author.pk)
        self.assertEqual(list(author.posts.all()), [post])
