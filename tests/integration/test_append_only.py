"""The database itself keeps the ledger append-only, on SQLite and on PostgreSQL.

With the triggers in place, an ordinary SQL client (even the table owner) cannot rewrite,
delete or truncate entries, roll a head back, or change a stored payload; the ledger is
byte-for-byte unchanged afterwards. On PostgreSQL a dedicated writer role (see
``writer_role_sql``) can append through :class:`Ledger` but lacks the privileges to rewrite
history at all — even when the owner has dropped the triggers — and, not being the owner,
cannot drop or disable the triggers itself.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from histaudit.errors import StoreError
from histaudit.ledger import chain
from histaudit.ledger.keys import KeyFileSigner, Signer, TrustStore, generate_keypair
from histaudit.ledger.records import StoredHead
from histaudit.ledger.store import HEAD_MISMATCH, Ledger, writer_role_sql
from histaudit.verify.verifier import verify_instance
from support.cli import cli, exits
from support.ledgers import LedgerDb, committed
from support.repo import REPO

INSTANCES = ("wf-one", "wf-two")
ENTRIES = 6
REFUSED = r"append-only|may only move forward|erased, not changed|must match its signed body"
FORGED = b'{"forged":true}'


@dataclass
class Setup:
    url: str
    signer: Signer
    trust: TrustStore
    old_head: StoredHead  # wf-one's head after its entry 3
    commitment: str  # a payload stored for wf-one's entry 2


def build(url: str) -> Setup:
    signer = KeyFileSigner.generate()
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


# --- heads: the trigger checks the signed body, not only the seq column ------------------

HEAD_REFUSED = REFUSED + r"|invalid byte sequence|invalid input syntax for type json"
_MOVE = "UPDATE histaudit_heads SET seq = :s, body = :b, sig = :g WHERE instance = 'wf-one'"
_NEW_HEAD = "INSERT INTO histaudit_heads (instance, seq, body, sig) VALUES (:i, :s, :b, :g)"


def _renumbered(head: StoredHead, seq: int) -> bytes:
    body = head.body.replace(f'"seq":{head.seq}'.encode(), f'"seq":{seq}'.encode())
    assert body != head.body
    return body


# name -> (statement, parameters from the setup): each rewrites or plants a head in a way
# the append rule never does, and the head triggers must refuse every one of them.
HEAD_REWRITES: dict[str, tuple[str, Callable[[Setup], dict[str, Any]]]] = {
    "older-genuine-body-with-bumped-seq": (
        _MOVE, lambda s: {"s": ENTRIES + 1, "b": s.old_head.body, "g": s.old_head.sig}),
    "seq-column-bumped-by-a-million": (
        "UPDATE histaudit_heads SET seq = seq + 1000000 WHERE instance = 'wf-one'",
        lambda s: {}),
    "seq-column-bumped-by-one": (
        "UPDATE histaudit_heads SET seq = seq + 1 WHERE instance = 'wf-one'", lambda s: {}),
    "body-and-column-name-a-missing-entry": (
        _MOVE, lambda s: {"s": ENTRIES + 1, "b": _renumbered(s.old_head, ENTRIES + 1),
                          "g": s.old_head.sig}),
    "body-not-json": (_MOVE, lambda s: {"s": ENTRIES + 1, "b": b"\x00\xff", "g": b"\x00"}),
    "body-json-array": (_MOVE, lambda s: {"s": ENTRIES + 1, "b": b"[7]", "g": b"\x00"}),
    "upsert-older-head": (
        _NEW_HEAD + " ON CONFLICT (instance) DO UPDATE SET seq = excluded.seq, "
                    "body = excluded.body, sig = excluded.sig",
        lambda s: {"i": "wf-one", "s": ENTRIES + 1, "b": s.old_head.body, "g": s.old_head.sig}),
    # A head planted for an instance that has no entries yet would make its first append
    # (an INSERT of the head) fail for ever.
    "plant-head-for-new-instance": (
        _NEW_HEAD, lambda s: {"i": "wf-new", "s": 1000000, "b": FORGED, "g": b"\x00" * 64}),
    "plant-copy-of-another-instances-head": (
        _NEW_HEAD, lambda s: {"i": "wf-new", "s": s.old_head.seq, "b": s.old_head.body,
                              "g": s.old_head.sig}),
}


def _appends_still_work(url: str, s: Setup) -> None:
    """A normal append moves the head (and creates a new instance's) afterwards."""
    with Ledger.open(url) as ledger:
        chain.append(ledger, "wf-one", "step.done", {"n": ENTRIES + 1}, signer=s.signer)
        chain.append(ledger, "wf-new", "step.done", {"n": 1}, signer=s.signer)
        one, new = ledger.head("wf-one"), ledger.head("wf-new")
        assert one is not None and one.seq == ENTRIES + 1
        assert new is not None and new.seq == 1
        for instance, count in (("wf-one", ENTRIES + 1), ("wf-new", 1)):
            report = verify_instance(ledger, instance, trust=s.trust, full=True, workers=1)
            assert report.findings == () and report.entries == count, report.findings


@pytest.mark.parametrize("attack", sorted(HEAD_REWRITES))
def test_head_triggers_check_the_signed_body(setup: Setup, attack: str) -> None:
    """As the SQLite file's owner or the PostgreSQL table owner, triggers in place."""
    stmt, params = HEAD_REWRITES[attack]
    before = snapshot(setup.url)
    with pytest.raises(sa.exc.DBAPIError, match=HEAD_REFUSED):
        run_sql(setup.url, stmt, params(setup))
    assert snapshot(setup.url) == before
    assert_verifies(setup.url, setup.trust)
    _appends_still_work(setup.url, setup)


@pytest.mark.postgres
@pytest.mark.parametrize("attack", sorted(HEAD_REWRITES))
def test_writer_role_cannot_rewrite_heads(writer: Writer, attack: str) -> None:
    """The writer's UPDATE and INSERT rights on heads meet the trigger, not a missing
    privilege: each rewrite is refused by what the signed body says."""
    stmt, params = HEAD_REWRITES[attack]
    before = snapshot(writer.owner_url)
    exc = _as_writer(writer, stmt, params(writer.setup))
    assert not _denied(exc) and re.search(HEAD_REFUSED, str(exc)), exc
    assert snapshot(writer.owner_url) == before
    _appends_still_work(writer.url, writer.setup)


@pytest.mark.postgres
def test_writer_temp_table_cannot_vouch_for_a_forged_head(writer: Writer) -> None:
    """A writer's own TEMP TABLE histaudit_entries shadows the real one in its session
    (pg_temp comes first in the search path); the head trigger must not look there."""
    before = snapshot(writer.owner_url)
    with LedgerDb(writer.url) as db, pytest.raises(sa.exc.DBAPIError, match=HEAD_MISMATCH):
        db.script(
            "CREATE TEMP TABLE histaudit_entries (leaf BIGINT, instance TEXT, seq BIGINT, "
            "hash TEXT, body BYTEA, sig BYTEA)",
            "INSERT INTO histaudit_entries VALUES (999, 'wf-one', 1000000, 'x', '', '')",
            "UPDATE histaudit_heads SET seq = 1000000, body = convert_to("
            "'{\"hash\":\"x\",\"instance\":\"wf-one\",\"leaf\":999,\"seq\":1000000}', "
            "'UTF8') WHERE instance = 'wf-one'")
    assert snapshot(writer.owner_url) == before
    _appends_still_work(writer.url, writer.setup)


# --- ledgers made with the old head triggers are upgraded by their first write ----------

# The head triggers histaudit installed before they checked the signed body (verbatim).
_OLD_SQLITE_HEAD_TRIGGER = """CREATE TRIGGER histaudit_heads_forward BEFORE UPDATE
       ON histaudit_heads WHEN NEW.seq <= OLD.seq OR NEW.instance <> OLD.instance
       BEGIN SELECT RAISE(ABORT, 'histaudit head may only move forward'); END"""
_OLD_PG_HEAD_FUNCTION = """CREATE OR REPLACE FUNCTION histaudit_head_forward() RETURNS trigger
       LANGUAGE plpgsql AS $$
       BEGIN
         IF NEW.seq <= OLD.seq OR NEW.instance <> OLD.instance THEN
           RAISE EXCEPTION 'histaudit head may only move forward';
         END IF;
         RETURN NEW;
       END $$"""


def _downgrade_head_triggers(url: str) -> None:
    """Make the ledger look like one an older histaudit created."""
    with LedgerDb(url) as db:
        if db.dialect == "sqlite":
            db.run("DROP TRIGGER histaudit_heads_checked_insert")
            db.run("DROP TRIGGER histaudit_heads_forward")
            db.run(_OLD_SQLITE_HEAD_TRIGGER)
        else:
            db.run("DROP TRIGGER histaudit_heads_checked_insert ON histaudit_heads")
            db.run(_OLD_PG_HEAD_FUNCTION)
    assert not _head_triggers_current(url)


def _head_triggers_current(url: str) -> bool:
    with LedgerDb(url) as db:
        if db.dialect == "sqlite":
            found = dict(db.rows(
                "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' "
                "AND name IN ('histaudit_heads_forward', 'histaudit_heads_checked_insert')"))
            return len(found) == 2 and all(HEAD_MISMATCH in sql for sql in found.values())
        (src,), = db.run("SELECT prosrc FROM pg_proc WHERE proname = 'histaudit_head_forward'")
        inserts = db.run("SELECT 1 FROM pg_trigger WHERE tgname = 'histaudit_heads_checked_insert'")
        return HEAD_MISMATCH in src and len(inserts) == 1


def test_old_ledger_gets_the_new_head_triggers_on_its_first_write(setup: Setup) -> None:
    _downgrade_head_triggers(setup.url)
    assert_verifies(setup.url, setup.trust)  # reading never changes the schema
    assert not _head_triggers_current(setup.url)
    with Ledger.open(setup.url) as ledger:
        chain.append(ledger, "wf-two", "step.done", {"n": ENTRIES + 1}, signer=setup.signer)
    assert _head_triggers_current(setup.url)
    for attack in ("seq-column-bumped-by-a-million", "older-genuine-body-with-bumped-seq",
                   "plant-head-for-new-instance"):
        stmt, params = HEAD_REWRITES[attack]
        with pytest.raises(sa.exc.DBAPIError, match=HEAD_REFUSED):
            run_sql(setup.url, stmt, params(setup))
    # Idempotent: a second writer finds them current and changes nothing.
    with LedgerDb(setup.url) as db:
        schema = db.rows("SELECT name, sql FROM sqlite_master ORDER BY name"
                         if db.dialect == "sqlite" else
                         "SELECT tgname, tgenabled FROM pg_trigger ORDER BY tgname")
    _appends_still_work(setup.url, setup)
    with LedgerDb(setup.url) as db:
        assert schema == db.rows("SELECT name, sql FROM sqlite_master ORDER BY name"
                                 if db.dialect == "sqlite" else
                                 "SELECT tgname, tgenabled FROM pg_trigger ORDER BY tgname")


def test_a_dropped_head_trigger_is_not_put_back(sqlite_url: str) -> None:
    """A trigger missing altogether was dropped on purpose by the file's owner: the store
    upgrades old triggers, it does not re-arm what its owner removed."""
    s = build(sqlite_url)
    with LedgerDb(sqlite_url) as db:
        db.run("DROP TRIGGER histaudit_heads_forward")
    _appends_still_work(sqlite_url, s)
    with LedgerDb(sqlite_url) as db:
        assert db.run("SELECT name FROM sqlite_master WHERE name = 'histaudit_heads_forward'") \
            == []


@pytest.mark.postgres
def test_writer_role_keeps_appending_to_an_old_ledger(writer: Writer,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """The writer may not replace the owner's triggers: it appends under the old ones and
    says so; the owner's next write upgrades them."""
    s = writer.setup
    _downgrade_head_triggers(writer.owner_url)
    with caplog.at_level("WARNING", logger="histaudit.ledger"), Ledger.open(writer.url) as led:
        chain.append(led, "wf-one", "step.done", {"n": ENTRIES + 1}, signer=s.signer)
    assert "open it for writing once as its owner" in caplog.text
    assert not _head_triggers_current(writer.owner_url)
    with Ledger.open(writer.owner_url) as ledger:
        chain.append(ledger, "wf-two", "step.done", {"n": ENTRIES + 1}, signer=s.signer)
    assert _head_triggers_current(writer.owner_url)
    exc = _as_writer(writer, *HEAD_REWRITES["seq-column-bumped-by-a-million"][0:1])
    assert HEAD_MISMATCH in str(exc)
    assert_verifies(writer.owner_url, s.trust, ENTRIES + 1)


# --- the user guide's role SQL is writer_role_sql(), and the role can checkpoint --------------

def _readme_role_sql() -> list[str]:
    text = (REPO / "docs" / "guide.md").read_text(encoding="utf-8")
    section = text.split("\n## PostgreSQL\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sql\n", 1)[1].split("```", 1)[0]
    stmts = [" ".join(line.split()) for line in block.strip().splitlines()]
    assert stmts[0].startswith("CREATE ROLE histaudit_writer LOGIN"), stmts
    assert all(s.endswith(";") for s in stmts), stmts
    return [s[:-1] for s in stmts[1:]]


def test_readme_role_sql_is_writer_role_sql() -> None:
    assert _readme_role_sql() == writer_role_sql()


@pytest.mark.postgres
def test_writer_role_made_from_the_readme_can_checkpoint(writer: Writer, tmp_path: Path) -> None:
    """`histaudit checkpoint` (and `export`, which stores one) run as the writer role."""
    key, _, ops = generate_keypair(tmp_path / "keys", name="ops")
    trust = tmp_path / "trust.json"
    trust.write_text(json.dumps({"keys": [ops.public.to_json(),
                                          writer.setup.signer.public.to_json()]}))
    r = cli("checkpoint", "--db", writer.url, "--key", key, cwd=tmp_path)
    exits(r, 0)
    assert f"\n{2 * ENTRIES}\n" in r.stdout
    with LedgerDb(writer.owner_url) as db:
        assert db.run("SELECT size FROM histaudit_checkpoints") == [(2 * ENTRIES,)]
    r = cli("export", "--db", writer.url, "--key", key, "--trust", trust, "--out",
            tmp_path / "bundle", cwd=tmp_path)
    exits(r, 0)
