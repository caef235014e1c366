"""The engine, from the libpq variables PGHOST, PGPORT, PGUSER, PGPASSWORD,
PGDATABASE: an empty postgresql+psycopg URL lets psycopg read them."""
import os

from sqlalchemy import create_engine


def make_engine(dbname=None, **kw):
    url = "postgresql+psycopg://"
    if dbname:
        url += f"/{dbname}"
    return create_engine(url, **kw)


def database_name():
    return os.environ.get("PGDATABASE", "appdb")
