"""What an append reads and writes in the store: the SQLite entries table's rowid leaf
(and ledgers made before it), and the newest body an append links to."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.schema import CreateTable

from histaudit.errors import StoreError
from histaudit.ledger import canonical, chain
from histaudit.ledger import records as fmt
from histaudit.ledger.keys import KeyFileSigner, Signer
from histaudit.ledger.kinds import Kind
from histaudit.ledger.store import Ledger, schema
from support.ledgers import LedgerDb, verify_url


def _sqlite_path(url: str) -> Path:
    return Path(url.removeprefix("sqlite:///"))


def _leaf_indexes(path: Path) -> list[str]:
    """The indexes of histaudit_entries that hold the leaf column alone."""
    con = sqlite3.connect(path)
    try:
        names = [r[1] for r in con.execute("PRAGMA index_list(histaudit_entries)")]
        return [n for n in names
                if [r[2] for r in con.execute(f'PRAGMA index_info("{n}")')] == ["leaf"]]
    finally:
        con.close()


def _append_some(url: str, signer: Signer) -> None:
    with Ledger.open(url) as ledger:
        before = ledger.leaf_count()
        for n in range(6):
            chain.append(ledger, f"i{n % 2}", Kind.ACTIVITY_STARTED, {"n": n}, signer=signer)
        assert chain.make_checkpoint(ledger, signer).size == before + 6


def test_a_new_sqlite_ledger_keys_its_entries_by_leaf_as_the_rowid(sqlite_url: str) -> None:
    signer = KeyFileSigner.generate()
    Ledger.open(sqlite_url, create=True).close()
    _append_some(sqlite_url, signer)
    path = _sqlite_path(sqlite_url)
    assert _leaf_indexes(path) == []  # no unique index beside the table: leaf is the rowid
    con = sqlite3.connect(path, isolation_level=None)
    try:
        assert con.execute("SELECT count(*) FROM histaudit_entries WHERE rowid = leaf"
                           ).fetchone() == (6,)
        # A leaf that is not an integer cannot be stored at all.
        with pytest.raises(sqlite3.IntegrityError, match="datatype mismatch"):
            con.execute("INSERT INTO histaudit_entries (leaf, instance, seq, hash, body, sig) "
                        "VALUES ('x', 'i9', 1, ?, x'00', x'00')", ("0" * 64,))
    finally:
        con.close()
    for instance in ("i0", "i1"):
        assert verify_url(sqlite_url, instance, signer, full=True).ok
    # PostgreSQL's table is unchanged.
    pg = str(CreateTable(schema.entries).compile(dialect=postgresql.dialect()))
    assert "leaf BIGINT NOT NULL" in pg


def test_a_sqlite_ledger_made_with_a_bigint_leaf_appends_and_verifies(
        sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ledgers created before the leaf became the rowid keep their table as it is."""
    signer = KeyFileSigner.generate()
    with monkeypatch.context() as m:
        m.setattr(schema.entries.c.leaf, "type", sa.BigInteger())
        Ledger.open(sqlite_url, create=True).close()
    path = _sqlite_path(sqlite_url)
    con = sqlite3.connect(path)
    try:
        (sql,), = con.execute("SELECT sql FROM sqlite_master WHERE name = 'histaudit_entries'")
    finally:
        con.close()
    assert "leaf BIGINT NOT NULL" in sql
    assert len(_leaf_indexes(path)) == 1  # the old separate primary-key index
    _append_some(sqlite_url, signer)
    _append_some(sqlite_url, signer)
    for instance in ("i0", "i1"):
        report = verify_url(sqlite_url, instance, signer, full=True)
        assert report.ok, report.findings
    with LedgerDb(sqlite_url) as db:
        assert db.run("SELECT max(seq) FROM histaudit_entries WHERE instance = 'i1'") == [(6,)]


class _Name(str):
    def __str__(self) -> str:
        return "not the value"


def test_a_kind_member_makes_the_bytes_of_its_string_on_the_fast_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A Kind member (a StrEnum) or an instance id of a str subclass is signed as the
    exact string it holds, in its entries and heads, and by the fast encoder: the reference
    one is never asked."""
    fields = {"seq": 1, "leaf": 0, "prev": fmt.GENESIS_PREV, "ts": fmt.now_ts(),
              "kid": "0123456789abcdef", "data": {"n": 1}}
    plain = fmt.entry_body(instance="wf-1", kind="activity.started", **fields)

    def reference(value: object) -> bytes:
        raise AssertionError(f"the reference encoder was asked for {value!r}")

    monkeypatch.setattr(canonical, "_slow_bytes", reference)
    body, parses = fmt.entry_body_parses(instance=_Name("wf-1"), kind=Kind.ACTIVITY_STARTED,
                                         **fields)
    assert body == plain and parses
    assert fmt.parse_entry(body).kind == "activity.started"
    head = {"seq": 1, "leaf": 0, "hash": fmt.sha256_hex(body), "ts": fields["ts"],
            "kid": fields["kid"]}
    assert fmt.head_body(instance=_Name("wf-1"), **head) == \
        fmt.head_body(instance="wf-1", **head)


def test_an_append_links_to_the_stored_newest_body_not_the_one_it_wrote(db_url: str) -> None:
    """The ledger remembers the body it last wrote per instance, to skip parsing it again;
    a stored body that differs from it, even by a byte, is what the next append reads."""
    signer = KeyFileSigner.generate()
    with Ledger.open(db_url, create=True) as ledger:
        chain.append(ledger, "a", Kind.WORKFLOW_STARTED, {}, signer=signer)
        two = chain.append(ledger, "a", Kind.ACTIVITY_STARTED, {"n": 2}, signer=signer)
        with LedgerDb(db_url) as db:
            db.lift_guards()
            newest = "UPDATE histaudit_entries SET body = :b WHERE leaf = 1"
            db.run(newest, b=b"not an entry")
            with pytest.raises(StoreError, match="newest stored entry of 'a' is not a valid"):
                chain.append(ledger, "a", Kind.ACTIVITY_STARTED, {"n": 3}, signer=signer)
            db.run(newest, b=two.body)  # put back byte for byte: linked to as before
            three = chain.append(ledger, "a", Kind.ACTIVITY_STARTED, {"n": 3}, signer=signer)
            assert (three.seq, three.prev) == (3, two.hash)
            # A valid body saying seq 7 in place of the newest: the next append follows it.
            forged = fmt.entry_body(instance="a", seq=7, leaf=2, prev=two.hash,
                                    kind=Kind.ACTIVITY_STARTED, ts=fmt.now_ts(),
                                    kid=signer.kid, data={"n": 7})
            db.run("UPDATE histaudit_entries SET body = :b WHERE leaf = 2", b=forged)
            db.restore_guards()
        eight = chain.append(ledger, "a", Kind.ACTIVITY_COMPLETED, {"n": 8}, signer=signer)
        assert (eight.seq, eight.prev) == (8, fmt.sha256_hex(forged))


def test_a_top_leaf_of_the_largest_bigint_is_named_not_a_driver_overflow(db_url: str) -> None:
    """Edited to leaf 2^63 - 1, the tree's size would be 2^63: the next append, checkpoint
    or export used to fail binding it ("Python int too large to convert to SQLite
    INTEGER"); now the store says what the column holds."""
    signer = KeyFileSigner.generate()
    Ledger.open(db_url, create=True).close()
    _append_some(db_url, signer)
    with LedgerDb(db_url) as db:
        db.lift_guards()
        db.set_entry_at(5, leaf=(1 << 63) - 1)
        db.restore_guards()
    with Ledger.open(db_url) as ledger:
        for attempt in (ledger.leaf_count, lambda: chain.make_checkpoint(ledger, signer),
                        lambda: chain.append(ledger, "i0", Kind.ACTIVITY_STARTED, {"n": 9},
                                             signer=signer)):
            with pytest.raises(StoreError, match="leaf column holds 9223372036854775807, the "
                                                 "largest 64-bit integer"):
                attempt()
