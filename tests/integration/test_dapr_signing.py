"""Dapr's own history signatures, made by the real daprd and checked by ``dapr-verify``.

One stack runs sentry + mTLS and daprd with the ``WorkflowHistorySigning`` preview
feature; the smoke app's ``two_steps`` workflow runs to completion; daprd is stopped so
its SQLite actor store is quiescent. ``histaudit dapr-verify`` then exits 0 on the store
as daprd left it, and 1 with the right finding on copies tampered the ways an attacker
with write access to the store would: one flipped byte of a history event, the last
signature row deleted, and against the wrong trust anchors or app id. An unknown
instance or an unreadable file is bad input (2).

A second signed run keeps daprd's actor state in PostgreSQL (``state.postgresql``):
``dapr-verify`` reads it by URL, read-only, with the same verdicts, and the two readers
return identical rows for one history copied from either store into the other.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from jsonschema import Draft202012Validator

from histaudit.bundle.dapr_state import read_workflow_rows
from histaudit.errors import EngineError
from histaudit.testing import teardown
from histaudit.testing.daprd import DaprdStack
from histaudit.testing.engine import free_port
from support.apps import AppProcess, AppRig
from support.cli import cli, exits, one_error_line
from support.dapr_audit import backup, foreign_ca
from support.postgres import PostgresServer
from support.repo import SCHEMAS

# one xdist worker builds the module fixtures (signed, pg_signed) once (tests/conftest.py)
pytestmark = [pytest.mark.engine, pytest.mark.daprd, pytest.mark.xdist_group("dapr_signing")]

APP_SCRIPT = Path(__file__).resolve().parent / "apps" / "smoke_app.py"
APP_ID = "histaudit"
INSTANCE = "signed-1"


class Signed:
    """What the module's one signed run left: the stopped stack's store and anchors."""

    def __init__(self, stack: DaprdStack, work: Path) -> None:
        self.stack = stack
        self.work = work
        self.db = stack.db_path
        self.anchors = stack.trust_anchors_path

    def copy(self, name: str) -> Path:
        """A consistent copy of the store (sqlite backup), to tamper with."""
        return backup(self.db, self.work / f"{name}.sqlite")

    def verify(self, db: Path, *extra: str, anchors: Path | None = None
               ) -> tuple[int, dict[str, object]]:
        r = cli("dapr-verify", INSTANCE, "--state-db", db, "--trust-anchors",
                anchors or self.anchors, "--json", *extra, cwd=self.work)
        assert r.returncode in (0, 1), r.stderr
        exits(r, r.returncode)
        return r.returncode, json.loads(r.stdout)


def _rows(db: Path, suffix: str) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT key, value FROM state WHERE key LIKE ? ORDER BY key",
                            (f"%||{INSTANCE}||{suffix}",)).fetchall()


FINDING = Draft202012Validator(json.loads(
    (SCHEMAS / "finding.output.schema.json").read_bytes()))


def _codes(doc: dict[str, object]) -> set[str]:
    """The finding codes of a ``--json`` document; each finding must match the finding
    schema every other command's findings match."""
    findings = doc["findings"]
    assert isinstance(findings, list)
    for finding in findings:
        FINDING.validate(finding)
    return {f["code"] for f in findings}


def _signed_run(work: Path, *, postgres_actor_store: str | None = None) -> DaprdStack:
    """Start a signing stack in ``work``, run ``two_steps`` as INSTANCE to completion and
    stop the stack (daprd closes the store: nothing is in flight when it is read). The
    caller tears the stack down."""
    try:
        stack = DaprdStack(state_dir=work / "daprd", app_id=APP_ID, history_signing=True,
                           postgres_actor_store=postgres_actor_store)
        stack.start()
    except EngineError as exc:
        pytest.fail(f"cannot start the signing daprd stack: {exc}", pytrace=False)
    try:
        smoke = work / "smoke"
        smoke.mkdir()
        with AppRig(stack) as rig:  # type: ignore[arg-type]  # the EngineProcess interface
            app = AppProcess(stack, [APP_SCRIPT],  # type: ignore[arg-type]
                             log=work / "app.log",
                             env={"SMOKE_DIR": str(smoke), "PYTHONUNBUFFERED": "1"},
                             ready=lambda pid: (smoke / f"ready.{pid}").exists())
            rig.add_app(app).start()
            rig.client.schedule_new_workflow("two_steps", input={"name": "audit"},
                                             instance_id=INSTANCE)
            state = rig.wait(INSTANCE, 120)
            assert state.runtime_status.name == "COMPLETED", app.tail()
        stack.stop()
    except BaseException:
        teardown(stack)
        raise
    return stack


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Signed]:
    work = tmp_path_factory.mktemp("dapr-signing")
    stack = _signed_run(work)
    try:
        yield Signed(stack, work)
    finally:
        teardown(stack)


def test_daprd_signed_history_verifies(signed: Signed) -> None:
    """The store as daprd left it: every event covered, every signature good, the signer
    the app's SPIFFE id under sentry's root."""
    assert _rows(signed.db, "signature-%"), "daprd wrote no history signatures"
    code, doc = signed.verify(signed.db, "--app-id", APP_ID)
    assert code == 0, doc
    assert doc["ok"] is True and doc["events"] == doc["covered_events"]
    assert isinstance(doc["signatures"], int) and doc["signatures"] >= 2
    assert doc["signers"] == [f"spiffe://public/ns/default/{APP_ID}"]
    # daprd attested both activities' results (step_one, step_two) and kept the signer's
    # certificate once, in an ext-sigcert row
    assert doc["attestations"] == 2 and len(_rows(signed.db, "ext-sigcert-%")) == 1


def _attested_io_digest(raw_event: bytes) -> bytes:
    """The ioDigest inside a stored TaskCompleted event's attestation payload."""
    from histaudit.verify.dapr_attestations import attestations_of
    from histaudit.verify.dapr_history import read_message

    (att,), _ = attestations_of([raw_event])
    digest: bytes = read_message(att.payload, {4: bytes})[4]
    return digest


def test_an_altered_io_digest_is_caught(signed: Signed) -> None:
    """One byte of one attestation's ioDigest changed in the store: its signature over the
    payload no longer verifies (and Dapr's history signature over the event breaks too)."""
    db = signed.copy("io-digest")
    key, raw = next((k, r) for k, r in ((k, base64.b64decode(v))
                                        for k, v in _rows(db, "history-%"))
                    if _has_attestation(r))
    digest = _attested_io_digest(raw)
    altered = raw.replace(digest, bytes([digest[0] ^ 0x01]) + digest[1:])
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE state SET value = ? WHERE key = ?",
                     (base64.b64encode(altered).decode(), key))
    code, doc = signed.verify(db)
    index = int(key.rsplit("-", 1)[1])
    assert code == 1 and doc["attestations"] == 2, doc
    invalid = [f for f in doc["findings"] if f["code"] == "dapr-attestation-invalid"]
    assert len(invalid) == 1 and f"event {index}" in invalid[0]["message"], invalid
    assert "signature does not verify" in invalid[0]["message"]
    assert "dapr-events-digest-mismatch" in _codes(doc)


def _has_attestation(raw_event: bytes) -> bool:
    from histaudit.verify.dapr_attestations import attestations_of

    return bool(attestations_of([raw_event])[0])


def test_a_flipped_history_byte_is_an_events_digest_mismatch(signed: Signed) -> None:
    db = signed.copy("flipped")
    key, value = _rows(db, "history-000001")[0]
    raw = bytearray(base64.b64decode(value))
    raw[len(raw) // 2] ^= 0x01
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE state SET value = ? WHERE key = ?",
                     (base64.b64encode(bytes(raw)).decode(), key))
    code, doc = signed.verify(db)
    assert code == 1 and "dapr-events-digest-mismatch" in _codes(doc), doc


def test_a_deleted_last_signature_leaves_history_uncovered(signed: Signed) -> None:
    db = signed.copy("cut")
    last = _rows(db, "signature-%")[-1][0]
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM state WHERE key = ?", (last,))
    code, doc = signed.verify(db)
    # the metadata row still counts the deleted signature
    assert code == 1 and {"dapr-history-uncovered", "dapr-state-inconsistent"} <= _codes(doc)


def test_another_app_id_finds_no_state(signed: Signed) -> None:
    """--app-id picks the app's own keys; the signer of what is there must be that app
    (tests/unit/verify/test_dapr_history.py forges the mismatch)."""
    r = cli("dapr-verify", INSTANCE, "--state-db", signed.db, "--trust-anchors",
            signed.anchors, "--app-id", "someone-else", cwd=signed.work)
    one_error_line(r, "someone-else")


def test_wrong_trust_anchors_are_untrusted(signed: Signed) -> None:
    other = foreign_ca(signed.work / "other-ca.pem")
    r = cli("dapr-verify", INSTANCE, "--state-db", signed.db, "--trust-anchors", other,
            "--json", cwd=signed.work)
    exits(r, 1)
    # the history signatures and the attestations both chain to sentry's root alone
    assert _codes(json.loads(r.stdout)) == {"dapr-cert-untrusted", "dapr-attestation-invalid"}


def test_unknown_instance_and_unreadable_store_are_bad_input(signed: Signed) -> None:
    r = cli("dapr-verify", "no-such-instance", "--state-db", signed.db,
            "--trust-anchors", signed.anchors, cwd=signed.work)
    one_error_line(r, "no-such-instance")
    junk = signed.work / "junk.sqlite"
    junk.write_bytes(b"not a database" * 100)
    r = cli("dapr-verify", INSTANCE, "--state-db", junk, "--trust-anchors", signed.anchors,
            cwd=signed.work)
    one_error_line(r, "junk.sqlite")


def test_rows_copied_under_another_app_are_signed_by_the_original(signed: Signed) -> None:
    """The instance's rows copied to another app's keys: two apps now hold it (bad input
    without --app-id); for the copy, the signer is the original app's identity."""
    db = signed.copy("copied")
    prefix = f"{APP_ID}||dapr.internal.default.{APP_ID}.workflow||"
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO state (key, value, is_binary, etag) "
                     "SELECT replace(key, ?, ?), value, is_binary, etag FROM state "
                     "WHERE key LIKE ?",
                     (prefix, "copycat||dapr.internal.default.copycat.workflow||",
                      f"{prefix}{INSTANCE}||%"))
    r = cli("dapr-verify", INSTANCE, "--state-db", db, "--trust-anchors", signed.anchors,
            cwd=signed.work)
    one_error_line(r, "--app-id")
    code, doc = signed.verify(db, "--app-id", "copycat")
    assert code == 1 and _codes(doc) == {"dapr-signer-identity"}, doc
    assert signed.verify(db, "--app-id", APP_ID)[0] == 0


def test_human_output_names_coverage_and_findings(signed: Signed) -> None:
    db = signed.copy("human")
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM state WHERE key LIKE ?", (f"%||{INSTANCE}||history-000000",))
    r = cli("dapr-verify", INSTANCE, "--state-db", db, "--trust-anchors", signed.anchors,
            cwd=signed.work)
    exits(r, 1)
    assert f"{INSTANCE}: " in r.stdout and "dapr-state-inconsistent" in r.stdout, r.stdout
    r = cli("dapr-verify", INSTANCE, "--state-db", signed.db, "--trust-anchors",
            signed.anchors, cwd=signed.work)
    exits(r, 0)
    assert "ok" in r.stdout and f"spiffe://public/ns/default/{APP_ID}" in r.stdout


def test_a_binary_row_that_is_not_base64_is_bad_input(signed: Signed) -> None:
    db = signed.copy("badb64")
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE state SET value = '***' WHERE key LIKE ?",
                     (f"%||{INSTANCE}||history-000002",))
    r = cli("dapr-verify", INSTANCE, "--state-db", db, "--trust-anchors", signed.anchors,
            cwd=signed.work)
    one_error_line(r, "base64")


# --- the PostgreSQL actor store (state.postgresql v1) -----------------------------------

PG_DB = "dapr_signing_state"


class PgSigned:
    """The PostgreSQL-backed signed run: daprd's database, stopped, and its URL."""

    def __init__(self, server: PostgresServer, stack: DaprdStack, work: Path) -> None:
        self.server = server
        self.stack = stack
        self.work = work
        self.anchors = stack.trust_anchors_path
        self.url = f"postgresql://postgres@127.0.0.1:{server.port}/{PG_DB}"
        self.conninfo = server.conninfo(PG_DB)

    def copy_table(self, name: str) -> str:
        """A copy of daprd's ``state`` table (same columns and types) to tamper with."""
        with psycopg.connect(self.conninfo) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {name}")  # name: a literal of this module
            conn.execute(f"CREATE TABLE {name} (LIKE state INCLUDING ALL)")
            conn.execute(f"INSERT INTO {name} SELECT * FROM state")
        return name

    def verify(self, *extra: str | Path, url: str | None = None,
               anchors: Path | None = None) -> tuple[int, dict[str, object]]:
        r = cli("dapr-verify", INSTANCE, "--state-db", url or self.url, "--trust-anchors",
                anchors or self.anchors, "--json", *extra, cwd=self.work)
        assert r.returncode in (0, 1), r.stderr
        exits(r, r.returncode)
        return r.returncode, json.loads(r.stdout)


@pytest.fixture(scope="module")
def pg_signed(pg_server: PostgresServer,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgSigned]:
    work = tmp_path_factory.mktemp("dapr-signing-pg")
    pg_server.drop_database(PG_DB)
    pg_server.create_database(PG_DB)
    stack = _signed_run(work, postgres_actor_store=pg_server.conninfo(PG_DB))
    try:
        assert stack.actor_store == "state.postgresql" and not stack.db_path.exists()
        yield PgSigned(pg_server, stack, work)
    finally:
        teardown(stack)
        pg_server.drop_database(PG_DB)


def _pg_rows(conninfo: str, table: str, suffix: str) -> list[tuple[str, object]]:
    with psycopg.connect(conninfo) as conn:
        return conn.execute(f"SELECT key, value FROM {table} WHERE key LIKE %s "  # literal
                            "ORDER BY key", (f"%||{INSTANCE}||{suffix}",)).fetchall()


@pytest.mark.postgres
def test_daprd_signed_history_in_postgresql_verifies(pg_signed: PgSigned) -> None:
    """daprd's own PostgreSQL rows, by URL: every event covered, every signature good."""
    rows = _pg_rows(pg_signed.conninfo, "state", "signature-%")
    assert rows, "daprd wrote no history signatures to PostgreSQL"
    # How the component keeps a binary value: a JSON string of its base64.
    assert all(isinstance(v, str) and base64.b64decode(v, validate=True) for _, v in rows)
    code, doc = pg_signed.verify("--app-id", APP_ID)
    assert code == 0, doc
    assert doc["ok"] is True and doc["events"] == doc["covered_events"]
    assert isinstance(doc["signatures"], int) and doc["signatures"] >= 2
    assert doc["signatures"] == len(rows)
    assert doc["signers"] == [f"spiffe://public/ns/default/{APP_ID}"]
    # SQLAlchemy's spelling of the URL (what the test fixtures hand out) reads the same.
    sa_url = pg_signed.url.replace("postgresql://", "postgresql+psycopg://", 1)
    assert pg_signed.verify(url=sa_url) == (code, doc)


@pytest.mark.postgres
def test_a_flipped_history_byte_in_postgresql_is_an_events_digest_mismatch(
        pg_signed: PgSigned) -> None:
    table = pg_signed.copy_table("flipped")
    ((key, value),) = _pg_rows(pg_signed.conninfo, table, "history-000001")
    assert isinstance(value, str)
    raw = bytearray(base64.b64decode(value))
    raw[len(raw) // 2] ^= 0x01
    with psycopg.connect(pg_signed.conninfo) as conn:
        conn.execute("UPDATE flipped SET value = to_jsonb(%s::text) WHERE key = %s",
                     (base64.b64encode(bytes(raw)).decode(), key))
    code, doc = pg_signed.verify("--table", table)
    assert code == 1 and "dapr-events-digest-mismatch" in _codes(doc), doc
    assert pg_signed.verify()[0] == 0  # daprd's own table is untouched


@pytest.mark.postgres
def test_postgresql_store_is_read_with_select_alone_in_a_read_only_transaction(
        pg_signed: PgSigned, monkeypatch: pytest.MonkeyPatch) -> None:
    """An auditor's role that may only SELECT the table verifies it, changing nothing;
    and every query of the reader runs in a transaction PostgreSQL itself reports READ
    ONLY, so even a superuser's URL cannot write through it."""
    with psycopg.connect(pg_signed.conninfo, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS dapr_auditor")
        conn.execute("CREATE ROLE dapr_auditor LOGIN")
        conn.execute("GRANT SELECT ON state TO dapr_auditor")
        before = conn.execute("SELECT count(*), max(updatedate) FROM state").fetchone()
    auditor = f"postgresql://dapr_auditor@127.0.0.1:{pg_signed.server.port}/{PG_DB}"
    code, doc = pg_signed.verify("--app-id", APP_ID, url=auditor)
    assert code == 0, doc
    with psycopg.connect(pg_signed.conninfo, autocommit=True) as conn:
        assert conn.execute("SELECT count(*), max(updatedate) FROM state").fetchone() == before
        conn.execute("REVOKE ALL ON state FROM dapr_auditor")
        conn.execute("DROP ROLE dapr_auditor")
    # The reader's own session: it asks for a READ ONLY transaction, which PostgreSQL
    # reports as the transaction's setting.
    import histaudit.bundle.dapr_state as reader

    seen: list[str] = []
    real_connect = psycopg.connect

    def spying_connect(*args: Any, **kwargs: Any) -> psycopg.Connection[Any]:
        conn = real_connect(*args, **kwargs)
        real_execute = conn.execute

        def execute(query: Any, *a: Any, **k: Any) -> Any:
            seen.append(str(real_execute("SHOW transaction_read_only").fetchone()))
            return real_execute(query, *a, **k)

        conn.execute = execute  # type: ignore[method-assign]
        return conn

    monkeypatch.setattr(psycopg, "connect", spying_connect)
    rows = reader.read_workflow_rows(pg_signed.url, INSTANCE)
    monkeypatch.undo()
    assert rows.history and seen and set(seen) == {"('on',)"}, seen


@pytest.mark.postgres
def test_the_store_owners_functions_never_shadow_the_catalog(pg_signed: PgSigned) -> None:
    """A store's owner who sets a search path with its own schema before pg_catalog
    (CVE-2018-1058) and a ``strpos`` that matches nothing would hide every row from the
    reader; the reader's session searches pg_catalog first, so it reads and verifies
    daprd's rows as before."""
    shadow = ("CREATE FUNCTION public.strpos(text, text) RETURNS integer "
              "LANGUAGE sql AS 'SELECT 0'")
    with psycopg.connect(pg_signed.conninfo, autocommit=True) as conn:
        conn.execute(shadow)
        conn.execute(f"ALTER DATABASE {PG_DB} SET search_path = public, pg_catalog")
    try:
        with psycopg.connect(pg_signed.conninfo) as conn:  # the shadow works for others
            assert conn.execute("SELECT strpos('abc', 'b')").fetchone() == (0,)
        code, doc = pg_signed.verify("--app-id", APP_ID)
        assert code == 0 and doc["ok"] is True and doc["signatures"] >= 2, doc
    finally:
        with psycopg.connect(pg_signed.conninfo, autocommit=True) as conn:
            conn.execute(f"ALTER DATABASE {PG_DB} RESET search_path")
            conn.execute("DROP FUNCTION public.strpos(text, text)")


@pytest.mark.postgres
def test_sqlite_and_postgresql_readers_return_identical_rows(
        signed: Signed, pg_signed: PgSigned) -> None:
    """One history in both layouts: the SQLite run's rows copied into a table of daprd's
    PostgreSQL layout, and the PostgreSQL run's rows into a copy of the SQLite layout. Each
    pair reads back identical and verifies the same."""
    # SQLite -> PostgreSQL: is_binary base64 text becomes a jsonb string, as daprd writes.
    with sqlite3.connect(signed.db) as src:
        lite = src.execute("SELECT key, value, is_binary FROM state").fetchall()
    with psycopg.connect(pg_signed.conninfo) as conn:
        conn.execute("DROP TABLE IF EXISTS from_sqlite")
        conn.execute("CREATE TABLE from_sqlite (LIKE state INCLUDING ALL)")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO from_sqlite (key, value, isbinary) "
                            "VALUES (%s, %s::jsonb, %s)",
                            [(k, json.dumps(v) if b else v, bool(b)) for k, v, b in lite])
    from_lite = read_workflow_rows(signed.db, INSTANCE)
    assert read_workflow_rows(pg_signed.url, INSTANCE, table="from_sqlite") == from_lite
    # Each run has its own sentry: the copied history chains to the SQLite run's root.
    code, doc = pg_signed.verify("--table", "from_sqlite", anchors=signed.anchors)
    assert (code, doc) == signed.verify(signed.db), doc
    assert code == 0 and doc["events"] == len(from_lite.history)

    # PostgreSQL -> SQLite: into an emptied copy of daprd's SQLite store.
    db = signed.copy("from-postgres")
    with psycopg.connect(pg_signed.conninfo) as conn:
        pg = conn.execute("SELECT key, CASE WHEN isbinary THEN value #>> '{}' "
                          "ELSE value::text END, isbinary FROM state").fetchall()
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM state")
        conn.executemany("INSERT INTO state (key, value, is_binary, etag) "
                         "VALUES (?, ?, ?, 'copied')", [(k, v, int(b)) for k, v, b in pg])
    from_pg = read_workflow_rows(pg_signed.url, INSTANCE)
    assert read_workflow_rows(db, INSTANCE) == from_pg
    assert from_pg != from_lite  # two runs, two histories: the comparison can tell
    code, doc = signed.verify(db, anchors=pg_signed.anchors)
    assert (code, doc) == pg_signed.verify() and code == 0, doc


@pytest.mark.postgres
def test_postgresql_bad_input_is_one_error_line(pg_signed: PgSigned) -> None:
    def run(url: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return cli("dapr-verify", *extra or (INSTANCE,), "--state-db", url,
                   "--trust-anchors", pg_signed.anchors, cwd=pg_signed.work)

    line = one_error_line(run(pg_signed.url, "no-such-instance"), "no-such-instance")
    assert "no workflow state for instance 'no-such-instance'" in line
    one_error_line(run(pg_signed.url, INSTANCE, "--app-id", "someone-else"), "someone-else")
    one_error_line(run(pg_signed.url, INSTANCE, "--table", "nope"), "nope", "--table")
    one_error_line(run(pg_signed.url, INSTANCE, "--table", "x;drop"), "bad table name")
    port = free_port()
    # Nothing listens there; the password never appears in the message.
    line = one_error_line(run(f"postgresql://postgres:s3cret@127.0.0.1:{port}/{PG_DB}"),
                          str(port))
    assert "s3cret" not in line and "***" in line
    one_error_line(run(f"postgresql://postgres@127.0.0.1:{pg_signed.server.port}/nodb"),
                   "nodb")
    one_error_line(run("postgresql://postgres@127.0.0.1:notaport/x"), "state store")
