"""The search path a PostgreSQL session of the ledger keeps: the owner's, less pg_catalog
(so that the catalog is searched first; test_bad_input shows an owner's function that
would otherwise shadow it)."""

from __future__ import annotations

import pytest

from histaudit.ledger.store.pg_session import without_catalog


@pytest.mark.parametrize(("path", "kept"), [
    ('"$user", public', '"$user", public'),           # the default: unchanged
    ("public, pg_catalog", "public"),
    ("pg_catalog, public", "public"),
    ("PG_CATALOG,ledger", "ledger"),                   # unquoted: folded to lower case
    ('"pg_catalog", ledger', "ledger"),
    ('"PG_CATALOG", ledger', '"PG_CATALOG", ledger'),  # quoted: another schema
    ('"a,pg_catalog", pg_catalog', '"a,pg_catalog"'),  # a comma inside quotes
    ("pg_catalog", "pg_catalog"),                      # nothing else: left as it is
])
def test_pg_catalog_is_dropped_from_the_path(path: str, kept: str) -> None:
    assert without_catalog(path) == kept
