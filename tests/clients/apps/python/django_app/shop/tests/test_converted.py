"""A table that had a 32-bit AutoField, converted to snowflake ids by
shop/migrations/0004_ticket_snowflake_id.py (SeparateDatabaseAndState:
snowflake_convert() for the database, AlterField to SnowflakeAutoField for
Django's state)."""
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.test import TestCase

from shop.fields import SnowflakeAutoField
from shop.models import Ticket, TicketNote

from .helpers import SNOWFLAKE_KEY, column_facts, snowflake_convert


class ConvertedTableTests(TestCase):
    def test_migrations_left_a_snowflake_key_and_wide_foreign_keys(self):
        self.assertEqual(column_facts("shop_ticket"), SNOWFLAKE_KEY)
        self.assertEqual(column_facts("shop_ticketnote", "ticket_id")["type"], "bigint")
        # TicketNote keeps its own 32-bit identity key.
        note_key = column_facts("shop_ticketnote")
        self.assertEqual((note_key["type"], note_key["identity"]), ("integer", "d"))

    def test_convert_again_is_a_no_op(self):
        # What 0004 runs on a database converted by hand before.
        self.assertEqual(snowflake_convert("shop_ticket"), [])

    def test_new_row_round_trips_and_foreign_key_works(self):
        self.assertIsInstance(Ticket._meta.pk, SnowflakeAutoField)
        ticket = Ticket.objects.create(subject="printer on fire")
        self.assertGreater(ticket.pk, 2**31 - 1)  # beyond any 32-bit AutoField
        self.assertEqual(Ticket.objects.get(pk=ticket.pk).subject, "printer on fire")
        note = TicketNote.objects.create(ticket=ticket, text="still burning")
        self.assertEqual(TicketNote.objects.get(pk=note.pk).ticket_id, ticket.pk)
        self.assertEqual(list(ticket.notes.values_list("text", flat=True)), ["still burning"])
        self.assertEqual(
            TicketNote.objects.filter(ticket__pk=ticket.pk).count(), 1
        )

    def test_the_model_as_it_was_before_0004_cannot_find_the_row(self):
        # The bug the recipe fixes: Ticket as migration 0003 left it (an
        # AutoField), over the converted table. Django refuses the lookup
        # before sending SQL (IntegerFieldOverflow in django/db/models/lookups.py).
        state = MigrationLoader(connection).project_state(("shop", "0003_ticket"))
        OldTicket = state.apps.get_model("shop", "Ticket")
        ticket = OldTicket.objects.create(subject="made by the old model")
        self.assertGreater(ticket.pk, 2**31 - 1)  # the insert itself works
        with self.assertRaises(OldTicket.DoesNotExist):
            OldTicket.objects.get(pk=ticket.pk)
        self.assertEqual(OldTicket.objects.get(subject="made by the old model").pk, ticket.pk)
        self.assertEqual(Ticket.objects.get(pk=ticket.pk).subject, "made by the old model")
