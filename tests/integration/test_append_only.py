"""The database itself keeps the ledger append-only, on SQLite and on PostgreSQL.

With the triggers in place, an ordinary SQL client (even the table owner) cannot rewrite,
delete or truncate entries, roll a head back, or change a stored payload; the ledger is
byte-for-byte unchanged afterwards. On PostgreSQL a dedicated writer role (see
``writer_role_sql``) can append through :class:`Ledger` but lacks the privileges to rewrite
history at all — even when the owner has dropped the triggers — and, not being the owner,
cannot drop or disable the triggers itself.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from histaudit.errors import StoreError
from histaudit.ledger import chain
from histaudit.ledger.keys import Signer, TrustStore
from histaudit.ledger.records import StoredHead
from histaudit.ledger.store import Ledger, writer_role_sql
from histaudit.verify.verifier import verify_instance
from support.ledgers import LedgerDb, committed

INSTANCES = ("wf-one", "wf-two")
ENTRIES = 6
REFUSED = r"append-only|may only move forward|erased, not changed"
FORGED = b'{"forged":true}'


@dataclass
class Setup:
    url: str
    signer: Signer
    trust: TrustStore
    old_head: StoredHead  # wf-one's head after its entry 3
    commitment: str  # a payload stored for wf-one's entry 2


def build(url: str) -> Setup:
    signer = Signer.generate()
    old_head: StoredHead | None = None
    commitment = ""
    with Ledger.open(url, create=True) as ledger:
        for seq in range(1, ENTRIES + 1):
            for instance in INSTANCES:
                data: dict[str, Any] = {"n": seq, "who": instance}
                stored = None
                if seq % 2 == 0:
                    data["arg"], stored = committed(f"{instance}/{seq}".encode())
                    if instance == "wf-one" and seq == 2:
                        commitment = data["arg"]["c"]
                chain.append(ledger, instance, "step.done", data, signer=signer, payloads=stored)
            if seq == 3:
                old_head = ledger.head("wf-one")
    assert old_head is not None and commitment
    return Setup(url, signer, TrustStore([signer.public]), old_head, commitment)


@pytest.fixture
def setup(db_url: str) -> Setup:
    return build(db_url)


def snapshot(url: str) -> tuple[list[tuple[Any, ...]], ...]:
    """Every stored byte of the ledger, in a stable order."""
    with LedgerDb(url) as db:
        return (db.rows("SELECT leaf, instance, seq, hash, body, sig FROM histaudit_entries "
                        "ORDER BY leaf"),
                db.rows("SELECT instance, seq, body, sig FROM histaudit_heads ORDER BY instance"),
                db.rows("SELECT commitment, salt, data FROM histaudit_payloads "
                        "ORDER BY commitment"))


def assert_verifies(url: str, trust: TrustStore, entries: int = ENTRIES) -> None:
    with Ledger.open(url) as ledger:
        for instance in INSTANCES:
            report = verify_instance(ledger, instance, trust=trust, full=True, workers=1)
            assert report.findings == (), report.findings
            assert report.entries == entries


def run_sql(url: str, stmt: str, params: dict[str, Any] | None = None) -> None:
    """One statement in its own transaction on its own connection."""
    with LedgerDb(url) as db:
        db.run(stmt, **(params or {}))


# name -> (statement, parameters from the setup)
ATTACKS: dict[str, tuple[str, Callable[[Setup], dict[str, Any]]]] = {
    "update-entry-body": (
        "UPDATE histaudit_entries SET body = :b WHERE instance = 'wf-one' AND seq = 3",
        lambda s: {"b": FORGED}),
    "update-entry-hash": (
        "UPDATE histaudit_entries SET hash = :h WHERE instance = 'wf-one' AND seq = 3",
        lambda s: {"h": "0" * 64}),
    "update-entry-sig": (
        "UPDATE histaudit_entries SET sig = :g WHERE instance = 'wf-one' AND seq = 3",
        lambda s: {"g": b"\x00" * 64}),
    "update-entry-instance": (
        "UPDATE histaudit_entries SET instance = 'wf-other' WHERE instance = 'wf-one' "
        "AND seq = 3", lambda s: {}),
    "update-every-leaf": ("UPDATE histaudit_entries SET leaf = leaf + 1000", lambda s: {}),
    "delete-middle-entry": (
        "DELETE FROM histaudit_entries WHERE instance = 'wf-one' AND seq = 3", lambda s: {}),
    "delete-tail-entries": (
        "DELETE FROM histaudit_entries WHERE instance = 'wf-one' AND seq > 3", lambda s: {}),
    "delete-all-entries": ("DELETE FROM histaudit_entries", lambda s: {}),
    "upsert-entry": (
        "INSERT INTO histaudit_entries (leaf, instance, seq, hash, body, sig) "
        "VALUES (0, 'wf-one', 1, :h, :b, :g) "
        "ON CONFLICT (leaf) DO UPDATE SET body = excluded.body",
        lambda s: {"h": "0" * 64, "b": FORGED, "g": b"\x00" * 64}),
    "head-rollback": (
        "UPDATE histaudit_heads SET seq = :s, body = :b, sig = :g WHERE instance = 'wf-one'",
        lambda s: {"s": s.old_head.seq, "b": s.old_head.body, "g": s.old_head.sig}),
    "head-rewrite-same-seq": (
        "UPDATE histaudit_heads SET body = :b WHERE instance = 'wf-one'",
        lambda s: {"b": FORGED}),
    "head-moved-to-other-instance": (
        "UPDATE histaudit_heads SET instance = 'wf-other', seq = seq + 1 "
        "WHERE instance = 'wf-one'", lambda s: {}),
    "delete-head": ("DELETE FROM histaudit_heads WHERE instance = 'wf-one'", lambda s: {}),
    "update-payload": (
        "UPDATE histaudit_payloads SET data = :d WHERE commitment = :c",
        lambda s: {"d": b"changed", "c": s.commitment}),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_triggers_refuse_rewriting_history(setup: Setup, attack: str) -> None:
    stmt, params = ATTACKS[attack]
    before = snapshot(setup.url)
    with pytest.raises(sa.exc.DBAPIError, match=REFUSED):
        run_sql(setup.url, stmt, params(setup))
    assert snapshot(setup.url) == before
    assert_verifies(setup.url, setup.trust)


@pytest.mark.parametrize("stmt", [
    "INSERT OR REPLACE INTO histaudit_entries (leaf, instance, seq, hash, body, sig) "
    "SELECT leaf, instance, seq, hash, :b, sig FROM histaudit_entries "
    "WHERE instance = 'wf-one' AND seq = 3",
    "REPLACE INTO histaudit_heads (instance, seq, body, sig) VALUES ('wf-one', :s, :hb, :hg)",
    "INSERT OR REPLACE INTO histaudit_payloads (commitment, salt, data) "
    "SELECT commitment, salt, :b FROM histaudit_payloads WHERE commitment = :c",
], ids=["entry", "head", "payload"])
def test_sqlite_replace_cannot_bypass_the_triggers(sqlite_url: str, stmt: str) -> None:
    """SQLite's REPLACE deletes the old row without firing DELETE triggers (unless
    recursive_triggers is on), so the store also refuses conflicting inserts."""
    s = build(sqlite_url)
    before = snapshot(sqlite_url)
    with pytest.raises(sa.exc.DBAPIError, match=REFUSED):
        run_sql(sqlite_url, stmt, {"b": b"forged", "c": s.commitment, "s": s.old_head.seq,
                                   "hb": s.old_head.body, "hg": s.old_head.sig})
    assert snapshot(sqlite_url) == before
    assert_verifies(sqlite_url, s.trust)


@pytest.mark.postgres
@pytest.mark.parametrize("tables", ["histaudit_entries", "histaudit_heads",
                                    "histaudit_entries, histaudit_heads, histaudit_payloads",
                                    "histaudit_entries CASCADE"])
def test_postgres_triggers_refuse_truncate(pg_url: str, tables: str) -> None:
    s = build(pg_url)
    before = snapshot(pg_url)
    with pytest.raises(sa.exc.DBAPIError, match=REFUSED):
        run_sql(pg_url, f"TRUNCATE {tables}")
    assert snapshot(pg_url) == before
    assert_verifies(pg_url, s.trust)


def test_appending_and_erasing_still_work_with_the_triggers(setup: Setup) -> None:
    """The triggers allow what the ledger needs: new entries, heads moving forward,
    and erasing a payload."""
    with Ledger.open(setup.url) as ledger:
        for instance in INSTANCES:
            chain.append(ledger, instance, "step.done", {"n": ENTRIES + 1}, signer=setup.signer)
        head = ledger.head("wf-one")
        assert head is not None and head.seq == ENTRIES + 1
    assert_verifies(setup.url, setup.trust, ENTRIES + 1)
    with Ledger.open(setup.url) as ledger:
        erased, entry = chain.erase_payload(ledger, INSTANCES[0], setup.commitment,
                                             signer=setup.signer, record={"reason": "test"})
        assert erased and entry.kind == "payload.erased" and entry.seq == ENTRIES + 2
        assert ledger.payload(setup.commitment) is None
        report = verify_instance(ledger, INSTANCES[0], trust=setup.trust, full=True)
        assert report.findings == () and report.entries == ENTRIES + 2


# --- PostgreSQL: a writer role that can append but never rewrite --------------------------

@dataclass
class Writer:
    role: str
    url: str  # connects as the writer role
    owner_url: str  # connects as the owner (the superuser that created the ledger)
    setup: Setup


def _owner_sql(url: str, *stmts: str) -> None:
    with LedgerDb(url) as db:
        for stmt in stmts:
            db.run(stmt)


@pytest.fixture
def writer(pg_url: str) -> Iterator[Writer]:
    s = build(pg_url)
    role = f"histaudit_writer_{uuid.uuid4().hex[:10]}"  # roles are cluster-wide
    _owner_sql(pg_url, f"CREATE ROLE {role} LOGIN", *writer_role_sql(role))
    url = sa.engine.make_url(pg_url).set(username=role).render_as_string(hide_password=False)
    try:
        yield Writer(role, url, pg_url, s)
    finally:
        _owner_sql(pg_url,
                   f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                   f"WHERE usename = '{role}'",
                   f"DROP OWNED BY {role}", f"DROP ROLE {role}")


def _as_writer(w: Writer, stmt: str, params: dict[str, Any] | None = None) -> BaseException:
    """Run ``stmt`` as the writer role; return the error it must raise."""
    with pytest.raises(sa.exc.DBAPIError) as info:
        run_sql(w.url, stmt, params)
    return info.value


def _denied(exc: BaseException) -> bool:
    return isinstance(getattr(exc, "orig", None), psycopg.errors.InsufficientPrivilege)


@pytest.mark.postgres
def test_writer_role_is_a_plain_role(writer: Writer) -> None:
    with LedgerDb(writer.url) as db:
        ((user, superuser),) = db.run(
            "SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user")
        ((owner,),) = db.run(
            "SELECT tableowner FROM pg_tables WHERE tablename = 'histaudit_entries'")
    assert user == writer.role and superuser is False and owner != writer.role


@pytest.mark.postgres
def test_writer_role_can_append_and_verify(writer: Writer) -> None:
    s = writer.setup
    with Ledger.open(writer.url) as ledger:
        for n in range(1, 11):
            for instance in (*INSTANCES, "wf-new"):
                ref, stored = committed(f"late {n}".encode())
                chain.append(ledger, instance, "step.done", {"n": 100 + n, "arg": ref},
                             signer=s.signer, payloads=stored)
        for instance, count in ((INSTANCES[0], ENTRIES + 10), (INSTANCES[1], ENTRIES + 10),
                                ("wf-new", 10)):
            report = verify_instance(ledger, instance, trust=s.trust, full=True, workers=1)
            assert report.findings == () and report.entries == count
        # Erasing is the owner's business: the writer has no DELETE on payloads.
        with pytest.raises(StoreError):
            chain.erase_payload(ledger, INSTANCES[0], s.commitment, signer=s.signer, record={})
    assert_verifies(writer.owner_url, s.trust, ENTRIES + 10)


WRITER_FORBIDDEN = {
    "update-entries": "UPDATE histaudit_entries SET body = body",
    "update-one-entry": "UPDATE histaudit_entries SET hash = :h WHERE seq = 2",
    "delete-entries": "DELETE FROM histaudit_entries WHERE seq > 3",
    "truncate-entries": "TRUNCATE histaudit_entries",
    "truncate-heads": "TRUNCATE histaudit_heads",
    "delete-heads": "DELETE FROM histaudit_heads",
    "update-payloads": "UPDATE histaudit_payloads SET data = :d",
    "delete-payloads": "DELETE FROM histaudit_payloads",
    "drop-entries": "DROP TABLE histaudit_entries",
    "drop-unique": "ALTER TABLE histaudit_entries DROP CONSTRAINT histaudit_entries_instance_seq",
    "drop-trigger": "DROP TRIGGER histaudit_entries_append_only ON histaudit_entries",
    "drop-head-trigger": "DROP TRIGGER histaudit_heads_forward ON histaudit_heads",
    "disable-triggers": "ALTER TABLE histaudit_entries DISABLE TRIGGER ALL",
    "disable-user-triggers": "ALTER TABLE histaudit_heads DISABLE TRIGGER USER",
    "replace-trigger-function": "CREATE OR REPLACE FUNCTION histaudit_refuse() RETURNS trigger "
                                "LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$",
    "drop-trigger-function": "DROP FUNCTION histaudit_refuse() CASCADE",
}


@pytest.mark.postgres
@pytest.mark.parametrize("attack", sorted(WRITER_FORBIDDEN))
def test_writer_role_cannot_rewrite_or_unprotect(writer: Writer, attack: str) -> None:
    before = snapshot(writer.owner_url)
    exc = _as_writer(writer, WRITER_FORBIDDEN[attack], {"h": "0" * 64, "d": b"x"})
    assert _denied(exc), exc
    assert snapshot(writer.owner_url) == before
    assert_verifies(writer.owner_url, writer.setup.trust)


@pytest.mark.postgres
def test_writer_role_cannot_roll_a_head_back(writer: Writer) -> None:
    """The writer may UPDATE heads (it moves them forward); the trigger, which it cannot
    remove, refuses any move backwards."""
    old = writer.setup.old_head
    before = snapshot(writer.owner_url)
    exc = _as_writer(writer, "UPDATE histaudit_heads SET seq = :s, body = :b, sig = :g "
                             "WHERE instance = 'wf-one'",
                     {"s": old.seq, "b": old.body, "g": old.sig})
    assert "may only move forward" in str(exc)
    assert snapshot(writer.owner_url) == before


@pytest.mark.postgres
@pytest.mark.parametrize("how", ["dropped", "disabled"])
def test_writer_role_cannot_rewrite_even_without_triggers(writer: Writer, how: str) -> None:
    """Privileges, not triggers, stop the writer: with every trigger gone it still
    cannot UPDATE, DELETE or TRUNCATE entries."""
    if how == "dropped":
        _owner_sql(writer.owner_url, *(
            f"DROP TRIGGER {t} ON {table}" for t, table in (
                ("histaudit_entries_append_only", "histaudit_entries"),
                ("histaudit_entries_no_truncate", "histaudit_entries"),
                ("histaudit_heads_no_delete", "histaudit_heads"),
                ("histaudit_heads_no_truncate", "histaudit_heads"))))
    else:
        _owner_sql(writer.owner_url, "ALTER TABLE histaudit_entries DISABLE TRIGGER ALL",
                   "ALTER TABLE histaudit_heads DISABLE TRIGGER ALL")
    before = snapshot(writer.owner_url)
    for stmt in ("UPDATE histaudit_entries SET body = body",
                 "UPDATE histaudit_entries SET hash = :h WHERE seq = 2",
                 "DELETE FROM histaudit_entries WHERE seq = 3",
                 "DELETE FROM histaudit_entries",
                 "TRUNCATE histaudit_entries",
                 "DELETE FROM histaudit_heads",
                 "TRUNCATE histaudit_heads"):
        exc = _as_writer(writer, stmt, {"h": "0" * 64})
        assert _denied(exc), (stmt, exc)
    assert snapshot(writer.owner_url) == before
    assert_verifies(writer.owner_url, writer.setup.trust)
