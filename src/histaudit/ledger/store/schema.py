"""The schema: tables, the append-only triggers of both dialects, the writer role's grants.

The database enforces append-only too: triggers refuse UPDATE and DELETE of entries,
and a head may only move forward, onto the newest entry its signed body names.
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
# True when NEW (a head row) is what chain.append stores: a BLOB body that is JSON whose
# integer seq, instance, leaf and hash are NEW's and those of the instance's newest entry.
# CASE guards json_extract against a body that is not JSON; coalesce turns NULL into "no".
_SQLITE_HEAD_BODY = "CAST(NEW.body AS TEXT)"
_SQLITE_HEAD_MATCHES = f"""coalesce(typeof(NEW.body) = 'blob' AND typeof(NEW.seq) = 'integer'
         AND CASE WHEN json_valid({_SQLITE_HEAD_BODY}) THEN
           json_type({_SQLITE_HEAD_BODY}, '$.seq') = 'integer'
           AND json_extract({_SQLITE_HEAD_BODY}, '$.seq') = NEW.seq
           AND json_extract({_SQLITE_HEAD_BODY}, '$.instance') = NEW.instance
           AND EXISTS (SELECT 1 FROM histaudit_entries e
                       WHERE e.instance = NEW.instance AND e.seq = NEW.seq
                         AND e.hash = json_extract({_SQLITE_HEAD_BODY}, '$.hash')
                         AND e.leaf = json_extract({_SQLITE_HEAD_BODY}, '$.leaf'))
           AND NOT EXISTS (SELECT 1 FROM histaudit_entries e
                           WHERE e.instance = NEW.instance AND e.seq > NEW.seq)
         ELSE 0 END, 0)"""

SQLITE_TRIGGERS = [
    """CREATE TRIGGER IF NOT EXISTS histaudit_entries_no_update BEFORE UPDATE
       ON histaudit_entries BEGIN SELECT RAISE(ABORT, 'histaudit ledger is append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS histaudit_entries_no_delete BEFORE DELETE
       ON histaudit_entries BEGIN SELECT RAISE(ABORT, 'histaudit ledger is append-only'); END""",
    # A head moves forward only, and only onto what its own body says: the seq, instance,
    # leaf and hash inside the (signed) body must be those of the instance's newest stored
    # entry. Checking the columns alone let a writer put back an older genuine body with a
    # bumped seq column, or bump the column a million so that every later append failed.
    f"""CREATE TRIGGER IF NOT EXISTS histaudit_heads_forward BEFORE UPDATE ON histaudit_heads
       BEGIN
         SELECT RAISE(ABORT, 'histaudit head may only move forward')
           WHERE NEW.seq <= OLD.seq OR NEW.instance <> OLD.instance;
         SELECT RAISE(ABORT, '{HEAD_MISMATCH}') WHERE NOT {_SQLITE_HEAD_MATCHES};
       END""",
    f"""CREATE TRIGGER IF NOT EXISTS histaudit_heads_checked_insert BEFORE INSERT
       ON histaudit_heads WHEN NOT {_SQLITE_HEAD_MATCHES}
       BEGIN SELECT RAISE(ABORT, '{HEAD_MISMATCH}'); END""",
    """CREATE TRIGGER IF NOT EXISTS histaudit_heads_no_delete BEFORE DELETE
       ON histaudit_heads BEGIN SELECT RAISE(ABORT, 'histaudit ledger is append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS histaudit_checkpoints_no_update BEFORE UPDATE
       ON histaudit_checkpoints
       BEGIN SELECT RAISE(ABORT, 'histaudit ledger is append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS histaudit_checkpoints_no_delete BEFORE DELETE
       ON histaudit_checkpoints
       BEGIN SELECT RAISE(ABORT, 'histaudit ledger is append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS histaudit_cosignatures_no_update BEFORE UPDATE
       ON histaudit_cosignatures
       BEGIN SELECT RAISE(ABORT, 'histaudit ledger is append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS histaudit_cosignatures_no_delete BEFORE DELETE
       ON histaudit_cosignatures
       BEGIN SELECT RAISE(ABORT, 'histaudit ledger is append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS histaudit_cosignatures_no_replace BEFORE INSERT
       ON histaudit_cosignatures
       WHEN EXISTS (SELECT 1 FROM histaudit_cosignatures WHERE size = NEW.size
                    AND witness = NEW.witness AND key_hash = NEW.key_hash
                    AND line = NEW.line)
       BEGIN SELECT RAISE(ABORT, 'histaudit ledger is append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS histaudit_payloads_no_update BEFORE UPDATE
       ON histaudit_payloads
       BEGIN SELECT RAISE(ABORT, 'payloads can be erased, not changed'); END""",
    # INSERT OR REPLACE deletes the conflicting row without firing DELETE triggers (unless
    # recursive_triggers is on), so an insert that would replace a row is refused up front.
    """CREATE TRIGGER IF NOT EXISTS histaudit_entries_no_replace BEFORE INSERT
       ON histaudit_entries
       WHEN EXISTS (SELECT 1 FROM histaudit_entries WHERE leaf = NEW.leaf)
         OR EXISTS (SELECT 1 FROM histaudit_entries
                    WHERE instance = NEW.instance AND seq = NEW.seq)
       BEGIN SELECT RAISE(ABORT, 'histaudit ledger is append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS histaudit_heads_no_replace BEFORE INSERT
       ON histaudit_heads
       WHEN EXISTS (SELECT 1 FROM histaudit_heads WHERE instance = NEW.instance)
       BEGIN SELECT RAISE(ABORT, 'histaudit head may only move forward'); END""",
    """CREATE TRIGGER IF NOT EXISTS histaudit_payloads_no_replace BEFORE INSERT
       ON histaudit_payloads
       WHEN EXISTS (SELECT 1 FROM histaudit_payloads WHERE commitment = NEW.commitment)
       BEGIN SELECT RAISE(ABORT, 'payloads can be erased, not changed'); END""",
]

PG_TRIGGERS = [
    """CREATE OR REPLACE FUNCTION histaudit_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN RAISE EXCEPTION 'histaudit ledger is append-only (% on %)', TG_OP, TG_TABLE_NAME;
       END $$""",
    # See histaudit_heads_forward on SQLite. The function's search_path is pinned, with
    # pg_temp last: otherwise a writer's own TEMP TABLE histaudit_entries (the TEMP right is
    # PUBLIC's by default) would shadow the real one inside the trigger and vouch for a
    # forged head. @SCHEMA@ is the ledger's schema, filled in when the function is created.
    f"""CREATE OR REPLACE FUNCTION histaudit_head_forward() RETURNS trigger LANGUAGE plpgsql
       SET search_path = pg_catalog, @SCHEMA@, pg_temp AS $$
       DECLARE doc jsonb;
       BEGIN
         IF TG_OP = 'UPDATE' AND (NEW.seq <= OLD.seq OR NEW.instance <> OLD.instance) THEN
           RAISE EXCEPTION 'histaudit head may only move forward';
         END IF;
         doc := convert_from(NEW.body, 'UTF8')::jsonb;
         IF jsonb_typeof(doc) IS DISTINCT FROM 'object'
            OR jsonb_typeof(doc -> 'seq') IS DISTINCT FROM 'number'
            OR doc ->> 'seq' IS DISTINCT FROM NEW.seq::text
            OR doc ->> 'instance' IS DISTINCT FROM NEW.instance
            OR NOT EXISTS (SELECT 1 FROM histaudit_entries e
                           WHERE e.instance = NEW.instance AND e.seq = NEW.seq
                             AND e.hash = doc ->> 'hash' AND e.leaf::text = doc ->> 'leaf')
            OR EXISTS (SELECT 1 FROM histaudit_entries e
                       WHERE e.instance = NEW.instance AND e.seq > NEW.seq) THEN
           RAISE EXCEPTION '{HEAD_MISMATCH}';
         END IF;
         RETURN NEW;
       END $$""",
    """CREATE OR REPLACE TRIGGER histaudit_entries_append_only BEFORE UPDATE OR DELETE
       ON histaudit_entries FOR EACH ROW EXECUTE FUNCTION histaudit_refuse()""",
    """CREATE OR REPLACE TRIGGER histaudit_entries_no_truncate BEFORE TRUNCATE
       ON histaudit_entries FOR EACH STATEMENT EXECUTE FUNCTION histaudit_refuse()""",
    """CREATE OR REPLACE TRIGGER histaudit_heads_forward BEFORE UPDATE
       ON histaudit_heads FOR EACH ROW EXECUTE FUNCTION histaudit_head_forward()""",
    """CREATE OR REPLACE TRIGGER histaudit_heads_checked_insert BEFORE INSERT
       ON histaudit_heads FOR EACH ROW EXECUTE FUNCTION histaudit_head_forward()""",
    """CREATE OR REPLACE TRIGGER histaudit_heads_no_delete BEFORE DELETE
       ON histaudit_heads FOR EACH ROW EXECUTE FUNCTION histaudit_refuse()""",
    """CREATE OR REPLACE TRIGGER histaudit_heads_no_truncate BEFORE TRUNCATE
       ON histaudit_heads FOR EACH STATEMENT EXECUTE FUNCTION histaudit_refuse()""",
    """CREATE OR REPLACE TRIGGER histaudit_checkpoints_append_only BEFORE UPDATE OR DELETE
       ON histaudit_checkpoints FOR EACH ROW EXECUTE FUNCTION histaudit_refuse()""",
    """CREATE OR REPLACE TRIGGER histaudit_checkpoints_no_truncate BEFORE TRUNCATE
       ON histaudit_checkpoints FOR EACH STATEMENT EXECUTE FUNCTION histaudit_refuse()""",
    """CREATE OR REPLACE TRIGGER histaudit_cosignatures_append_only BEFORE UPDATE OR DELETE
       ON histaudit_cosignatures FOR EACH ROW EXECUTE FUNCTION histaudit_refuse()""",
    """CREATE OR REPLACE TRIGGER histaudit_cosignatures_no_truncate BEFORE TRUNCATE
       ON histaudit_cosignatures FOR EACH STATEMENT EXECUTE FUNCTION histaudit_refuse()""",
    """CREATE OR REPLACE TRIGGER histaudit_payloads_no_update BEFORE UPDATE
       ON histaudit_payloads FOR EACH ROW EXECUTE FUNCTION histaudit_refuse()""",
]


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
