"""SQLAlchemy 2.1 models whose primary keys PostgreSQL fills with
snowflake_nextval().

monotonic=True (new in SQLAlchemy 2.1; read in SQLAlchemy 2.1.9) tells the
ORM the function's values increase in the order rows are inserted, which
snowflake_nextval() guarantees (strictly increasing across the server):
- sqlalchemy/sql/functions.py: Function.__init__(..., monotonic=False) stores it;
- sqlalchemy/sql/schema.py: DefaultClause._is_monotonic_fn is true for such a
  server_default, and Table._sentinel_column_characteristics then takes the
  primary key as the "insert sentinel" (a BigInteger key with a server_default
  is not the table's autoincrement column, so it is the branch "for
  non-autoincrement pk if all elements are client side" that accepts it);
  without monotonic a server_default pk has no sentinel;
- sqlalchemy/sql/compiler.py: _deliver_insertmanyvalues_batches() falls back
  to one INSERT per row ("use_row_at_a_time", is_downgraded) when the ORM asks
  for RETURNING in parameter order and there is no sentinel; with one,
  PostgreSQL gets INSERT ... SELECT ... FROM (VALUES ...) ORDER BY sen_counter
  RETURNING id, up to insertmanyvalues_page_size (1000) rows a statement;
- sqlalchemy/engine/default.py: _deliver_insertmanyvalues_batches() sorts the
  RETURNING rows of such an "implicit sentinel" by the id
  (sorted(rows, key=operator.itemgetter(-1))) and hands them to the objects
  in order: correct because the ids grow in the order the rows were made.
Alembic renders the default as sa.text('snowflake_nextval()') (the DDL is the
same; monotonic only matters to the ORM at run time).
"""
from sqlalchemy import BigInteger, ForeignKey, String, func
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class Base(DeclarativeBase):
    pass


def snowflake_pk():
    return mapped_column(
        BigInteger,
        primary_key=True,
        server_default=func.snowflake_nextval(monotonic=True),
    )


class Author(Base):
    __tablename__ = "sa_author"

    id: Mapped[int] = snowflake_pk()
    name: Mapped[str] = mapped_column(String(100))
    posts: Mapped[list["Post"]] = relationship(back_populates="author")


class Post(Base):
    __tablename__ = "sa_post"

    id: Mapped[int] = snowflake_pk()
    author_id: Mapped[int] = mapped_column(ForeignKey("sa_author.id"))
    title: Mapped[str] = mapped_column(String(200))
    author: Mapped[Author] = relationship(back_populates="posts")
