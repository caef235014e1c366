"""Why the recipe is not BigIntegerField(primary_key=True, db_default=...):
this documents Django 5.2's behaviour (ticket #36260, fixed in 6.0)."""
from django.db.models.expressions import DatabaseDefault
from django.test import TestCase

from shop.models import DbDefaultAuthor, DbDefaultPost


class DbDefaultPkTests(TestCase):
    def test_bulk_create_leaves_database_default_and_fk_writes_null(self):
        authors = DbDefaultAuthor.objects.bulk_create(
            [DbDefaultAuthor(name=f"a{i}") for i in range(3)]
        )
        self.assertTrue(all(isinstance(a.pk, DatabaseDefault) for a in authors))
        # The rows have ids in the database, the objects do not know them.
        self.assertEqual(DbDefaultAuthor.objects.filter(pk__gt=2**31).count(), 3)
        # Used as a foreign key, the unknown pk is written as NULL.
        post = DbDefaultPost.objects.create(author=authors[0], title="t")
        self.assertIsNone(DbDefaultPost.objects.get(pk=post.pk).author_id)
