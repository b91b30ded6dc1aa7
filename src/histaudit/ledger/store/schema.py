"""The schema: tables, the message the head triggers raise, the writer role's grants.

The database enforces append-only too: triggers refuse UPDATE and DELETE of entries,
and a head may only move forward, onto the newest entry its signed body names. Each
driver holds its own dialect's triggers (``SQLITE_TRIGGERS`` in :mod:`.sqlite`,
``PG_TRIGGERS`` in :mod:`.postgres`) and installs them through
:meth:`~.driver.Driver.install_guards`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Connection

if TYPE_CHECKING:
    from .driver import Driver

metadata = sa.MetaData()
meta_table = sa.Table(
    "histaudit_meta", metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)
entries = sa.Table(
    "histaudit_entries", metadata,
    # INTEGER on SQLite: the leaf is then the table's rowid, not a separate unique index
    # beside it, so an append writes one B-tree fewer (and max(leaf) reads the rowid). A
    # ledger created with BIGINT keeps its own table and works the same.
    sa.Column("leaf", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True,
              autoincrement=False),
    sa.Column("instance", sa.Text, nullable=False),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("hash", sa.String(64), nullable=False),
    sa.Column("body", sa.LargeBinary, nullable=False),
    sa.Column("sig", sa.LargeBinary, nullable=False),
    sa.UniqueConstraint("instance", "seq", name="histaudit_entries_instance_seq"),
    # Streaming one instance pages through it in leaf order; without this index every
    # page re-scans and re-sorts the instance (benchmarks/results/2026-11-29.json, stream:
    # 80 µs per entry at 1,000,000 entries without it, 7.5 with it).
    sa.Index("histaudit_entries_instance_leaf", "instance", "leaf"),
)
heads = sa.Table(
    "histaudit_heads", metadata,
    sa.Column("instance", sa.Text, primary_key=True),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("body", sa.LargeBinary, nullable=False),
    sa.Column("sig", sa.LargeBinary, nullable=False),
)
payloads = sa.Table(
    "histaudit_payloads", metadata,
    sa.Column("commitment", sa.String(64), primary_key=True),
    sa.Column("salt", sa.LargeBinary, nullable=False),
    sa.Column("data", sa.LargeBinary, nullable=False),
)
checkpoints = sa.Table(
    "histaudit_checkpoints", metadata,
    sa.Column("size", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("root", sa.String(64), nullable=False),
    sa.Column("note", sa.LargeBinary, nullable=False),
)
# Witness cosignatures of a stored checkpoint (docs/format.md §12): the exact signature
# line a witness returned, under its checkpoint size, witness name and key hash. A
# separate, append-only table: the checkpoint row itself is never updated to gain them.
# The line is part of the key: a row that is not the witness's (the INSERT-only writer
# role can add one) must not keep its real cosignature out; which row counts is decided
# by whoever reads them (witness/policy.py counted_cosignatures).
cosignatures = sa.Table(
    "histaudit_cosignatures", metadata,
    sa.Column("size", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("witness", sa.Text, primary_key=True),
    sa.Column("key_hash", sa.String(8), primary_key=True),
    sa.Column("line", sa.LargeBinary, primary_key=True),
)

HEAD_MISMATCH = "histaudit head must match its signed body and the newest entry"
"""What the head triggers say when a head's columns, body and the entries disagree. It is
also how :meth:`Ledger.write` recognizes triggers older than these (they lack it)."""
def writer_role_sql(role: str = "histaudit_writer") -> list[str]:
    """SQL (run by the owner) for a PostgreSQL role that can append and read, nothing else.

    The role may INSERT entries, payloads and checkpoints, INSERT and UPDATE heads (a
    trigger lets a head only move forward, onto the newest entry its signed body names),
    and SELECT; it has no UPDATE, DELETE or TRUNCATE on entries. docs/guide.md
    (PostgreSQL) shows exactly these statements (a test compares them).
    """
    return [
        f"GRANT SELECT, INSERT ON histaudit_entries, histaudit_payloads, histaudit_checkpoints, "
        f"histaudit_cosignatures TO {role}",
        f"GRANT SELECT, INSERT, UPDATE ON histaudit_heads TO {role}",
        f"GRANT SELECT ON histaudit_meta TO {role}",
        f"REVOKE UPDATE, DELETE, TRUNCATE ON histaudit_entries FROM {role}",
    ]


def _install_guards(conn: Connection, driver: Driver, *, upgrade: bool = False) -> None:
    """Create the append-only triggers (``upgrade``: replace outdated ones first).

    Also the two migrations there are: a ledger made before witness cosignatures gets the
    (empty) ``histaudit_cosignatures`` table here, before its triggers are created, and one
    whose table is keyed without the line is rekeyed (``driver.rekey_cosignatures``).
    """
    cosignatures.create(conn, checkfirst=True)
    if _cosignatures_keyed_old(conn):
        driver.rekey_cosignatures(conn)
    driver.install_guards(conn, upgrade=upgrade)


def _cosignatures_keyed_old(conn: Connection) -> bool:
    """True when the cosignatures table is keyed without its line (histaudit before
    issue #40): one row per witness key and size, the first written kept for good."""
    pk = sa.inspect(conn).get_pk_constraint(cosignatures.name)
    return "line" not in (pk.get("constrained_columns") or ())


def _guards_outdated(conn: Connection, driver: Driver) -> bool:
    """True when the head trigger exists but is an older histaudit's, or the ledger predates
    the cosignatures table or its present key (see :meth:`Ledger._upgrade_guards`)."""
    if not sa.inspect(conn).has_table(cosignatures.name) or _cosignatures_keyed_old(conn):
        return True
    return driver.guards_outdated(conn)


def not_stored_tables(conn: Connection, driver: Driver) -> list[str]:
    """What is wrong with each of the ledger's tables that is not a plain stored table.

    A database handed to the verifier may define ``histaudit_entries`` (or any other of
    its names) as a view, a virtual or foreign table, or with a generated column: rows
    that no write ever stored, computed on every read — endless ones from a recursive
    view, or a gigabyte value from a file of a few kilobytes. Such a ledger is refused
    at open, before any row is read. Returns one phrase per bad table ("histaudit_entries
    is a view"); empty when every ledger table present is a plain table.
    """
    return driver.not_stored_tables(conn, [t.name for t in metadata.sorted_tables])
