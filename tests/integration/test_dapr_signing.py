"""Dapr's own history signatures, made by the real daprd and checked by ``dapr-verify``.

One stack runs sentry + mTLS and daprd with the ``WorkflowHistorySigning`` preview
feature; the smoke app's ``two_steps`` workflow runs to completion; daprd is stopped so
its SQLite actor store is quiescent. ``histaudit dapr-verify`` then exits 0 on the store
as daprd left it, and 1 with the right finding on copies tampered the ways an attacker
with write access to the store would: one flipped byte of a history event, the last
signature row deleted, and against the wrong trust anchors or app id. An unknown
instance or an unreadable file is bad input (2).
"""

from __future__ import annotations

import base64
import json
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from jsonschema import Draft202012Validator

from histaudit.crashtest.daprd import DaprdStack
from histaudit.errors import EngineError
from support.apps import AppProcess, AppRig
from support.cli import cli, exits, one_error_line
from support.daprd import teardown
from support.repo import SCHEMAS

pytestmark = [pytest.mark.engine, pytest.mark.daprd]

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
        target = self.work / f"{name}.sqlite"
        src, dst = sqlite3.connect(self.db), sqlite3.connect(target)
        try:
            src.backup(dst)
        finally:
            src.close()
            dst.close()
        return target

    def verify(self, db: Path, *extra: str) -> tuple[int, dict[str, object]]:
        r = cli("dapr-verify", INSTANCE, "--state-db", db, "--trust-anchors", self.anchors,
                "--json", *extra, cwd=self.work)
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


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Signed]:
    work = tmp_path_factory.mktemp("dapr-signing")
    try:
        stack = DaprdStack(state_dir=work / "daprd", app_id=APP_ID, history_signing=True)
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
        stack.stop()  # daprd closes the store: nothing is in flight when it is read
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
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "not sentry")])
    now = datetime.now(UTC)
    ca = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
          .public_key(key.public_key()).serial_number(1)
          .not_valid_before(now - timedelta(days=1)).not_valid_after(now + timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(key, hashes.SHA256()))
    other = signed.work / "other-ca.pem"
    other.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    r = cli("dapr-verify", INSTANCE, "--state-db", signed.db, "--trust-anchors", other,
            "--json", cwd=signed.work)
    exits(r, 1)
    assert _codes(json.loads(r.stdout)) == {"dapr-cert-untrusted"}


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
