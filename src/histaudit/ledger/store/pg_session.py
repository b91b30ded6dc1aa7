"""A PostgreSQL session that finds the catalog's functions before anyone else's: what the
ledger's driver (:mod:`.postgres`) and a reader of Dapr's PostgreSQL state store
(:mod:`histaudit.bundle.dapr_state`) both do first on every connection.

An unqualified function or operator resolves along the search path, and a database's
owner can set one for every session (``ALTER DATABASE … SET search_path``). pg_catalog
is searched first unless the path names it; a path that names it after the owner's own
schema lets the owner's ``to_regclass``, ``strpos`` or ``=`` run in place of the
catalog's inside the reader's session (the class of CVE-2018-1058): a ledger's owner
could then hide a view from the check at open, or hand a reader other rows.
:func:`catalog_first` drops pg_catalog from the session's path, which puts it first
again; tables are found, and created, in the same schemas as before.
"""

from __future__ import annotations

from typing import Any

__all__ = ["catalog_first", "without_catalog"]


def catalog_first(conn: Any) -> None:
    """Make the psycopg connection ``conn``'s session search pg_catalog first."""
    with conn.cursor() as cur:  # every name qualified: none resolves along the path
        cur.execute("SELECT pg_catalog.current_setting('search_path')")
        path = cur.fetchone()[0]
        kept = without_catalog(path)
        if kept != path:
            cur.execute("SELECT pg_catalog.set_config('search_path', %s, false)", (kept,))
    conn.commit()  # a SET in a transaction that is rolled back would be undone


def without_catalog(path: str) -> str:
    """A ``search_path`` value without its ``pg_catalog`` entries (unchanged if that would
    leave it empty): ``public, pg_catalog`` -> ``public``."""
    parts, part, quoted = [], "", False
    for ch in path:
        if ch == '"':
            quoted = not quoted
        if ch == "," and not quoted:
            parts.append(part.strip())
            part = ""
        else:
            part += ch
    parts.append(part.strip())
    kept = [p for p in parts if p and (p[1:-1] if p.startswith('"') else p.lower())
            != "pg_catalog"]
    return ", ".join(kept) if kept and len(kept) < len(parts) else path
