"""Alembic environment of the snowflake_id recipe (Alembic's "generic"
template, with the models' metadata and the URL from the PG* variables).

Nothing here is about the extension: with Alembic's default
include_schemas=False, autogenerate reflects only the connection's default
schema (alembic/autogenerate/compare/schema.py, _produce_net_changes(), Alembic
1.20.1: schemas = {None}, i.e. current_schema()), and the extension keeps its
tables snowflake_claims and snowflake_floors and its view snowflake_status in its own schema
snowflake_id; its functions in public are not compared at all. So
`alembic revision --autogenerate` proposes nothing about them. (A search_path
that puts snowflake_id first would make it the default schema: don't.)

The -x options are what check_alembic.py tries besides the default:
  -x compare_server_default=true  also compare server defaults
  -x include_schemas=true         reflect every schema, less snowflake_id
  -x schema_filter=false          ... and without that filter (to see why)
"""
from logging.config import fileConfig

from alembic import context
from sqlalchemy import pool

from db import make_engine
from models import Base

config = context.config
if config.config_file_name is not None:
    fileConfig(config.config_file_name)

target_metadata = Base.metadata
x = context.get_x_argument(as_dictionary=True)


def include_name(name, type_, parent_names):
    # Only consulted with include_schemas=True: leave the extension's schema
    # out of the comparison, or autogenerate proposes dropping its tables.
    if type_ == "schema":
        return name != "snowflake_id"
    return True


def options():
    opts = {"target_metadata": target_metadata}
    if x.get("compare_server_default") == "true":
        opts["compare_server_default"] = True
    if x.get("include_schemas") == "true":
        opts["include_schemas"] = True
        if x.get("schema_filter") != "false":
            opts["include_name"] = include_name
    return opts


def run_migrations_offline() -> None:
    context.configure(
        url=make_engine().url,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        **options(),
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connectable = make_engine(poolclass=pool.NullPool)
    with connectable.connect() as connection:
        context.configure(connection=connection, **options())
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
