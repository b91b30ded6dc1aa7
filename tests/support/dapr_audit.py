"""One real signed daprd run of an audited app, for the Dapr cross-check tests.

:func:`audited_dapr_run` starts sentry + mTLS + daprd with ``WorkflowHistorySigning``,
runs tests/integration/apps/dapr_crosscheck_app.py (the real histaudit interceptor
writing a real ledger) and leaves, daprd stopped:

* ``GATED`` completed; while its second activity waited on a gate the store was copied
  with SQLite's backup API (``mid``): the state of an earlier, validly signed moment;
* ``PURGED`` completed, then purged through the workflow client's purge API;
* the engine's own history of ``GATED`` (``engine_history``, generated protobufs), read
  before daprd stopped.

Tamper tests then work on copies (:meth:`AuditedDaprRun.copy`).
"""

from __future__ import annotations

import base64
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from histaudit.ledger.keys import generate_keypair
from histaudit.testing import teardown
from histaudit.testing.daprd import DaprdStack
from support.apps import AppProcess, AppRig, wait_until
from support.cli import cli

APP = Path(__file__).resolve().parents[1] / "integration" / "apps" / "dapr_crosscheck_app.py"
APP_ID = "histaudit"
GATED, PURGED, TERMINATED = "xc-gated", "xc-purged", "xc-terminated"
OUTPUT = {"first": "hello audit", "second": "HELLO AUDIT!"}


def backup(src_path: Path, target: Path) -> Path:
    """A consistent copy of a SQLite file (the online backup API), even while written."""
    src, dst = sqlite3.connect(src_path), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
    return target


def foreign_ca(target: Path) -> Path:
    """Write a self-signed CA certificate (PEM) that is not sentry's to ``target``: trust
    anchors no daprd certificate chains to."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "not sentry")])
    now = datetime.now(UTC)
    ca = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
          .public_key(key.public_key()).serial_number(1)
          .not_valid_before(now - timedelta(days=1)).not_valid_after(now + timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(key, hashes.SHA256()))
    target.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    return target


@dataclass
class AuditedDaprRun:
    work: Path
    db: Path  # daprd's actor state store, as daprd left it
    mid: Path  # the store copied mid-run of GATED
    anchors: Path
    ledger: str
    ledger_path: Path
    keys: Path  # trust store (public keys) of the ledger
    key: Path  # the app's private signing key (export signs its manifest with it)
    engine_history: list[Any]

    def copy(self, name: str) -> Path:
        return backup(self.db, self.work / f"{name}.sqlite")

    def dapr_verify(self, instance: str, db: Path, *extra: str | Path, ledger: bool = True
                    ) -> Any:
        more = ("--db", self.ledger, "--trust", self.keys) if ledger else ()
        return cli("dapr-verify", instance, "--state-db", db, "--trust-anchors", self.anchors,
                   *more, *extra, cwd=self.work)


def rows(db: Path, instance: str, suffix: str = "%") -> list[tuple[str, str, int]]:
    """(key, value, is_binary) of ``instance``'s rows whose name matches ``suffix``."""
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT key, value, is_binary FROM state WHERE key LIKE ? "
                            "ORDER BY key", (f"%||{instance}||{suffix}",)).fetchall()


def value(db: Path, key: str) -> bytes:
    with sqlite3.connect(db) as conn:
        text, is_binary = conn.execute("SELECT value, is_binary FROM state WHERE key = ?",
                                       (key,)).fetchone()
    return base64.b64decode(text) if is_binary else str(text).encode()


def put(db: Path, key: str, raw: bytes) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE state SET value = ?, is_binary = 1 WHERE key = ?",
                     (base64.b64encode(raw).decode(), key))


@contextmanager
def audited_dapr_run(work: Path) -> Iterator[AuditedDaprRun]:
    stack = DaprdStack(state_dir=work / "daprd", app_id=APP_ID, history_signing=True)
    stack.start()
    try:
        data = work / "data"
        data.mkdir()
        key, _pub, _signer = generate_keypair(work / "keys", name="app")
        ledger_path = work / "ledger.db"
        ledger = f"sqlite:///{ledger_path}"
        mid = work / "mid.sqlite"
        with AppRig(stack) as rig:  # type: ignore[arg-type]  # the EngineProcess interface
            app = AppProcess(stack, [APP], log=work / "app.log",  # type: ignore[arg-type]
                             env={"APP_DATA": str(data), "HISTAUDIT_DB": ledger,
                                  "HISTAUDIT_KEY": str(key), "PYTHONUNBUFFERED": "1"},
                             ready="APP READY")
            rig.add_app(app).start()
            rig.client.schedule_new_workflow("gated_pair", input={"name": "audit", "gate": True},
                                             instance_id=GATED)
            wait_until(lambda: (data / "shout.started").exists(), 60, "shout to start",
                       details=app.tail)
            # daprd may dispatch shout before it stores the step that scheduled it: wait
            # for greet's completion and shout's TaskScheduled (history-000005) to be stored.
            wait_until(lambda: bool(rows(stack.db_path, GATED, "history-000005")), 60,
                       "daprd to store the step scheduling shout", details=app.tail)
            backup(stack.db_path, mid)
            (data / "release").write_text("go")
            state = rig.wait(GATED, 120)
            assert state.runtime_status.name == "COMPLETED", app.tail()
            history = rig.history(GATED)
            rig.client.schedule_new_workflow("gated_pair", input={"name": "gone"},
                                             instance_id=PURGED)
            state = rig.wait(PURGED, 120)
            assert state.runtime_status.name == "COMPLETED", app.tail()
            rig.client.purge_workflow(PURGED)
            rig.client.schedule_new_workflow("awaits_approval", instance_id=TERMINATED)
            wait_until(lambda: len(rows(stack.db_path, TERMINATED, "history-%")) >= 6, 60,
                       "awaits_approval to be past greet", details=app.tail)
            rig.client.terminate_workflow(TERMINATED, output="withdrawn")
            state = rig.wait(TERMINATED, 120)
            assert state.runtime_status.name == "TERMINATED", app.tail()
        stack.stop()  # daprd closes the store: nothing is in flight when it is read
        yield AuditedDaprRun(work=work, db=stack.db_path, mid=mid,
                             anchors=stack.trust_anchors_path, ledger=ledger,
                             ledger_path=ledger_path, keys=work / "keys", key=key,
                             engine_history=history)
    finally:
        teardown(stack)
