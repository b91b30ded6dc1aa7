"""Small real ledgers for tests: building them, reading them back, and raw SQL on them.

* :func:`committed` and :func:`append_order` build entries the way the interceptor does
  (payloads committed with a salt, the reference ``{"c", "n"}`` in the signed data).
* :func:`read_entries`, :func:`only`, :func:`stored_payload` and :func:`verify_url` read a
  ledger back through the library, as an auditor would after the fact.
* :class:`World` is what a CLI test holds: a ledger's URL, the key that signed it and
  the key files a user would pass.
* :class:`LedgerDb` is plain SQL on the ledger's database as its owner (the SQLite file)
  or superuser (PostgreSQL): an attacker, or an operator restoring a backup. It is the one
  place tests lift the append-only triggers.

Plain Python (no pytest), like the rest of ``support``.
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import sqlalchemy as sa

from histaudit.ledger import chain
from histaudit.ledger import records as fmt
from histaudit.ledger.keys import Signer, TrustStore
from histaudit.ledger.store import Ledger
from histaudit.ledger.store.postgres import APPEND_LOCK_KEY
from histaudit.verify.report import Report
from histaudit.verify.verifier import verify_instance

from .cli import cli

__all__ = [
    "ORDER_RESULT",
    "ORDER_SECRET",
    "SQLITE_TRIGGERS",
    "LedgerDb",
    "Payloads",
    "Row",
    "World",
    "append_order",
    "committed",
    "only",
    "read_entries",
    "stored_payload",
    "verify_url",
    "write_lock_held",
]

#: What ``chain.append(payloads=...)`` stores: salt -> (commitment, payload bytes).
Payloads = dict[bytes, tuple[str, bytes]]


# --- building ------------------------------------------------------------------------------

@dataclass
class World:
    """A ledger, the key that signed it, and the files a CLI user would pass."""

    tmp: Path    # the working directory the CLI runs in
    url: str
    signer: Signer
    key: Path    # private key file (0600)
    trust: Path  # the matching *.pub.json

    def run(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        """``histaudit *args`` in ``tmp``, as a user runs it."""
        return cli(*args, cwd=self.tmp)


def committed(data: bytes, salt: bytes | None = None) -> tuple[dict[str, Any], Payloads]:
    """The reference ``{"c": commitment, "n": length}`` to ``data``, and its stored row.

    ``salt`` defaults to a fresh random one, as in real use.
    """
    salt = fmt.new_salt() if salt is None else salt
    c = fmt.commit(data, salt)
    return {"c": c, "n": len(data)}, {salt: (c, data)}


ORDER_SECRET = b'{"card":"4111-1111-1111-1111","holder":"Ada Lovelace"}'
ORDER_RESULT = b'{"charged":true,"amount":42}'


def append_order(ledger: Ledger, signer: Signer, instance: str, *,
                 reexecuted: bool = False) -> None:
    """A small order workflow of 4 entries: an input payload at entry 1, the output
    payload on the activity's completion (entry 3).

    ``reexecuted`` adds a second ``activity.started`` for the same task (a crash retry),
    which the verifier reports as ``activity-reexecuted`` at severity info (at-least-once
    delivery is Dapr's contract; only what it does to side effects is a warning or error).
    """
    ref, rows = committed(ORDER_SECRET)
    chain.append(ledger, instance, "workflow.started", {"workflow": "order", "input": ref},
                 signer=signer, payloads=rows)
    charge = {"task_id": 1, "activity": "charge"}
    chain.append(ledger, instance, "activity.started", charge, signer=signer)
    if reexecuted:
        chain.append(ledger, instance, "activity.started", charge, signer=signer)
    out_ref, out_rows = committed(ORDER_RESULT)
    chain.append(ledger, instance, "activity.completed",
                 {**charge, "output": out_ref, "output_digest": fmt.sha256_hex(ORDER_RESULT)},
                 signer=signer, payloads=out_rows)
    chain.append(ledger, instance, "workflow.completed", {"status": "COMPLETED"}, signer=signer)


# --- reading back --------------------------------------------------------------------------

def read_entries(url: str, instance: str) -> list[fmt.Entry]:
    """Every stored entry of ``instance``, parsed, in seq order."""
    with Ledger.open(url) as ledger:
        return [fmt.parse_entry(row.body) for row in ledger.entries(instance)]


def only(entries: Iterable[fmt.Entry], kind: str, **match: Any) -> list[fmt.Entry]:
    """The entries of ``kind`` whose data has every ``match`` item."""
    return [e for e in entries
            if e.kind == kind and all(e.data.get(k) == v for k, v in match.items())]


def stored_payload(url: str, ref: dict[str, Any] | None) -> bytes | None:
    """The stored payload behind a reference, checked against its commitment and length."""
    if ref is None:
        return None
    with Ledger.open(url) as ledger:
        stored = ledger.payload(ref["c"])
    assert stored is not None, f"payload {ref} not stored"
    salt, raw = stored
    assert fmt.commitment_matches(ref["c"], raw, salt)
    assert len(raw) == ref["n"]
    return raw


def verify_url(url: str, instance: str, trust: TrustStore | Signer, *, full: bool = False,
               workers: int | None = None) -> Report:
    """Verify ``instance`` from a freshly opened ledger (a signer: trust its key only)."""
    if isinstance(trust, Signer):
        trust = TrustStore([trust.public])
    with Ledger.open(url) as ledger:
        return verify_instance(ledger, instance, trust=trust, full=full, workers=workers)


# --- raw SQL -------------------------------------------------------------------------------

#: The append-only triggers a SQLite ledger has (at least).
SQLITE_TRIGGERS = frozenset({
    "histaudit_entries_no_update", "histaudit_entries_no_delete", "histaudit_heads_forward",
    "histaudit_heads_no_delete", "histaudit_payloads_no_update",
})
_PG_GUARDED = ("histaudit_entries", "histaudit_heads", "histaudit_payloads")


@dataclass
class Row:
    """One stored entry, as the database holds it."""

    leaf: int
    seq: int
    hash: str
    body: bytes
    sig: bytes


def _plain(value: Any) -> Any:
    return bytes(value) if isinstance(value, memoryview) else value


class LedgerDb:
    """Plain SQL on a ledger's database, one autocommitted statement at a time."""

    def __init__(self, url: str) -> None:
        self.engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
        self.dialect = self.engine.dialect.name

    def __enter__(self) -> LedgerDb:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self.engine.dispose()

    # -- statements -----------------------------------------------------------------------

    def run(self, stmt: str, **params: Any) -> list[Any]:
        """One statement (``:name`` parameters); its rows, if it returns any."""
        with self.engine.connect() as conn:
            result = conn.execute(sa.text(stmt), params)
            return list(result.all()) if result.returns_rows else []

    def count(self, stmt: str, **params: Any) -> int:
        """One data-changing statement; how many rows it changed."""
        with self.engine.connect() as conn:
            return int(conn.execute(sa.text(stmt), params).rowcount)

    def script(self, *statements: str) -> None:
        """Statements as written (no parameters, so ``::bytea`` and ``%`` stay as they are)."""
        with self.engine.connect() as conn:
            for stmt in statements:
                conn.exec_driver_sql(stmt)

    def rows(self, query: str) -> list[tuple[Any, ...]]:
        """The rows of ``query`` as plain tuples (bytes for binary columns)."""
        return [tuple(_plain(v) for v in row) for row in self.run(query)]

    def tables(self) -> list[str]:
        with self.engine.connect() as conn:
            return sorted(sa.inspect(conn).get_table_names())

    # -- the append-only guards -----------------------------------------------------------

    def lift_guards(self) -> None:
        """Remove the append-only enforcement: SQLite drops every trigger, PostgreSQL
        disables the triggers of every histaudit table (as superuser). Afterwards only
        verification is left to notice an edit."""
        if self.dialect == "sqlite":
            names = {r[0] for r in self.run(
                "SELECT name FROM sqlite_master WHERE type = 'trigger'")}
            assert names >= SQLITE_TRIGGERS, names
            for name in sorted(names):
                self.run(f'DROP TRIGGER "{name}"')
            assert not self.run("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        else:
            tables = set(self._pg_tables())
            assert tables >= set(_PG_GUARDED), tables
            for table in sorted(tables):
                self.run(f"ALTER TABLE {table} DISABLE TRIGGER ALL")
            enabled = self.run("SELECT tgname FROM pg_trigger WHERE tgname LIKE 'histaudit%' "
                               "AND tgenabled <> 'D'")
            assert enabled == [], enabled

    def restore_guards(self) -> None:
        """PostgreSQL: enable the triggers again (SQLite's dropped ones stay dropped)."""
        if self.dialect == "postgresql":
            for table in self._pg_tables():
                self.run(f"ALTER TABLE {table} ENABLE TRIGGER ALL")

    def _pg_tables(self) -> list[str]:
        return sorted(r[0] for r in self.run(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE 'histaudit%'"))

    # -- entries --------------------------------------------------------------------------

    def entry(self, instance: str, seq: int) -> Row:
        rows = self.run("SELECT leaf, seq, hash, body, sig FROM histaudit_entries "
                        "WHERE instance = :i AND seq = :s", i=instance, s=seq)
        assert len(rows) == 1, rows
        r = rows[0]
        return Row(r.leaf, r.seq, r.hash, bytes(r.body), bytes(r.sig))

    def last_body(self, instance: str) -> bytes:
        """The body of ``instance``'s newest entry."""
        (body,) = self.run("SELECT body FROM histaudit_entries WHERE instance = :i "
                           "ORDER BY seq DESC LIMIT 1", i=instance)[0]
        return bytes(body)

    def set_entry(self, instance: str, seq: int, /, **cols: Any) -> None:
        """Overwrite columns (hash, body, sig, instance, leaf, seq) of one stored entry."""
        self._set_entry("instance = :i AND seq = :s", {"i": instance, "s": seq}, cols)

    def set_entry_at(self, leaf: int, /, **cols: Any) -> None:
        """Overwrite columns of the stored entry at ``leaf``."""
        self._set_entry("leaf = :l", {"l": leaf}, cols)

    def _set_entry(self, where: str, key: dict[str, Any], cols: dict[str, Any]) -> None:
        assert cols and set(cols) <= {"hash", "body", "sig", "instance", "leaf", "seq"}, cols
        assignments = ", ".join(f"{c} = :new_{c}" for c in cols)
        params = {f"new_{c}": v for c, v in cols.items()}
        changed = self.count(f"UPDATE histaudit_entries SET {assignments} WHERE {where}",
                             **key, **params)
        assert changed == 1, (where, key, changed)

    def rewrite_body(self, leaf: int, old: bytes, new: bytes, *, rehash: bool = True) -> None:
        """Replace ``old`` by ``new`` in the body at ``leaf`` (and its hash column)."""
        (body,) = self.run("SELECT body FROM histaudit_entries WHERE leaf = :l", l=leaf)[0]
        forged = bytes(body).replace(old, new)
        assert forged != bytes(body), (old, body)
        if rehash:
            self.run("UPDATE histaudit_entries SET body = :b, hash = :h WHERE leaf = :l",
                     b=forged, h=hashlib.sha256(forged).hexdigest(), l=leaf)
        else:
            self.run("UPDATE histaudit_entries SET body = :b WHERE leaf = :l", b=forged, l=leaf)

    def delete_entries(self, instance: str, *seqs: int) -> None:
        for seq in seqs:
            self.run("DELETE FROM histaudit_entries WHERE instance = :i AND seq = :s",
                     i=instance, s=seq)

    def insert_entry(self, *, leaf: int, instance: str, seq: int, digest: str, body: bytes,
                     sig: bytes) -> None:
        """INSERT one row (``digest``: its hash column): what the append-only triggers
        allow anyone to do."""
        self.run("INSERT INTO histaudit_entries (leaf, instance, seq, hash, body, sig) "
                 "VALUES (:leaf, :instance, :seq, :hash, :body, :sig)", leaf=leaf,
                 instance=instance, seq=seq, hash=digest, body=body, sig=sig)

    def append_raw(self, instance: str, body: bytes) -> int:
        """Insert ``body`` as the next leaf and seq of ``instance``, unsigned; its seq."""
        leaf = self.run("SELECT max(leaf) FROM histaudit_entries")[0][0]
        seq = self.run("SELECT max(seq) FROM histaudit_entries WHERE instance = :i",
                       i=instance)[0][0]
        seq = (seq or 0) + 1
        self.insert_entry(leaf=(leaf or 0) + 1, instance=instance, seq=seq,
                          digest=fmt.sha256_hex(body), body=body, sig=b"\x00" * 64)
        return seq

    def rebuild_entries_without_constraints(self) -> None:
        """Copy the entries into a table with no unique constraint and no primary key, so
        a forged row can share its twin's (instance, seq) and leaf."""
        blob = "BYTEA" if self.dialect == "postgresql" else "BLOB"
        self.run(f"""CREATE TABLE histaudit_entries_forged (
                       leaf BIGINT NOT NULL, instance TEXT NOT NULL, seq BIGINT NOT NULL,
                       hash VARCHAR(64) NOT NULL, body {blob} NOT NULL, sig {blob} NOT NULL)""")
        self.run("INSERT INTO histaudit_entries_forged (leaf, instance, seq, hash, body, sig) "
                 "SELECT leaf, instance, seq, hash, body, sig FROM histaudit_entries")
        self.run("DROP TABLE histaudit_entries")
        self.run("ALTER TABLE histaudit_entries_forged RENAME TO histaudit_entries")

    # -- heads and payloads ---------------------------------------------------------------

    def head(self, instance: str) -> tuple[int, bytes, bytes]:
        rows = self.run("SELECT seq, body, sig FROM histaudit_heads WHERE instance = :i",
                        i=instance)
        assert len(rows) == 1
        return rows[0].seq, bytes(rows[0].body), bytes(rows[0].sig)

    def set_head(self, instance: str, *, seq: int, body: bytes, sig: bytes) -> None:
        self.run("UPDATE histaudit_heads SET seq = :s, body = :b, sig = :g "
                 "WHERE instance = :i", i=instance, s=seq, b=body, g=sig)

    def delete_head(self, instance: str) -> None:
        self.run("DELETE FROM histaudit_heads WHERE instance = :i", i=instance)

    def payload_data(self) -> list[bytes]:
        """Every stored payload's bytes."""
        return [row[0] for row in self.rows("SELECT data FROM histaudit_payloads")]


@contextlib.contextmanager
def write_lock_held(url: str) -> Iterator[None]:
    """Another process's open write transaction (SQLite) or append lock (PostgreSQL)."""
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()
        return
    with LedgerDb(url) as db, db.engine.connect() as conn:
        conn.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": APPEND_LOCK_KEY})
        try:
            yield
        finally:
            conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": APPEND_LOCK_KEY})
