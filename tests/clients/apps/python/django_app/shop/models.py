from django.conf import settings
from django.db import models
from django.db.models import Func

from .fields import SnowflakeAutoField


class Author(models.Model):
    # id: SnowflakeAutoField, from ShopConfig.default_auto_field
    name = models.CharField(max_length=100)


class Tag(models.Model):
    name = models.CharField(max_length=50)


class Post(models.Model):
    author = models.ForeignKey(Author, on_delete=models.CASCADE, related_name="posts")
    title = models.CharField(max_length=200)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    # Its link table, shop_post_tags, is a model Django makes: a snowflake key
    # too (shop/fields.py says why that takes DEFAULT_AUTO_FIELD).
    tags = models.ManyToManyField(Tag, related_name="posts")


# A child model (multi-table inheritance): its key is a link to Post's, a
# snowflake id, and so is its own link table's (shop_article_editors).
class Article(Post):
    editors = models.ManyToManyField(Author, related_name="edited")


# A table created before the switch to snowflake ids: migration 0003 made it
# with a 32-bit AutoField (identity), migration 0004 converted it.
class Ticket(models.Model):
    id = SnowflakeAutoField(primary_key=True)  # was models.AutoField(primary_key=True)
    subject = models.CharField(max_length=100)


class TicketNote(models.Model):
    id = models.AutoField(primary_key=True)  # this table keeps its identity
    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="notes")
    text = models.CharField(max_length=100)


# What NOT to do, kept to show why (tests/test_db_default.py): a pk with
# db_default. Django 5.2's bulk_create() leaves every such pk a DatabaseDefault
# object (Django ticket #36260, fixed in 6.0).
class SnowflakeNextval(Func):
    function = "snowflake_nextval"
    template = "%(function)s()"
    output_field = models.BigIntegerField()


class DbDefaultAuthor(models.Model):
    id = models.BigIntegerField(primary_key=True, db_default=SnowflakeNextval())
    name = models.CharField(max_length=100)


class DbDefaultPost(models.Model):
    author = models.ForeignKey(DbDefaultAuthor, null=True, on_delete=models.CASCADE)
    title = models.CharField(max_length=200)
