"""The throwaway PostgreSQL server starts and SQLAlchemy + psycopg 3 can use it."""

from __future__ import annotations

import pytest
import sqlalchemy as sa


@pytest.mark.postgres
def test_select_version_on_fresh_database(pg_url: str) -> None:
    """A fresh database answers ``select version()`` over the psycopg driver."""
    engine = sa.create_engine(pg_url)
    try:
        with engine.connect() as conn:
            version = conn.execute(sa.text("select version()")).scalar_one()
            tables = conn.execute(
                sa.text(
                    "select count(*) from information_schema.tables where table_schema = 'public'"
                )
            ).scalar_one()
    finally:
        engine.dispose()
    assert str(version).startswith("PostgreSQL ")
    assert tables == 0, "each test must get an empty database"
    assert engine.dialect.driver == "psycopg"


def test_db_url_gives_a_usable_ledger_url(db_url: str) -> None:
    """``db_url`` yields a working SQLAlchemy URL on both stores (postgres param is marked)."""
    engine = sa.create_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("create table probe (x integer)"))
            conn.execute(sa.text("insert into probe values (1)"))
            assert conn.execute(sa.text("select sum(x) from probe")).scalar_one() == 1
    finally:
        engine.dispose()
