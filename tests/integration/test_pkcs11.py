"""Signing keys held in a PKCS#11 token (issue #42, item 1), on a real SoftHSM2 token
(Debian's softhsm2, `make softhsm`) and the real engine.

Each test gets a token of its own (its own SoftHSM2 configuration and token directory)
holding an Ed25519 key pair generated inside it, so no private key ever exists as a file:
* an audited workflow signs its ledger in the token, the public key is exported from the
  token into a trust store, and `verify --all --full` proves the ledger with that alone;
  the same key signs its SCITT export, which scitt-cose accepts (issue #53);
* every wrong way to name the key (PIN wrong, PIN in the URI, PIN file others can read,
  no such token, key, or module, a URI without a key label) is one line, exit 2, the PIN
  shown nowhere, and the ledger unchanged.
* a token removed while ``retention apply`` signs through it (issue #50) is one line,
  exit 2, on SQLite and PostgreSQL; the erasure under way is rolled back whole and the
  ledger verifies (≈ 3.5 s of CPU of the total: a fresh interpreter per store).

All PKCS#11 work happens in child processes (the app, the CLI, the key generator): a
PKCS#11 library reads its configuration once per process. Cost: ≈ 9.5 s of CPU, 10 s of
wall.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from histaudit.bundle.cose import pem
from histaudit.ledger.keys import TrustStore
from histaudit.ledger.store import Ledger
from histaudit.testing.engine import EngineProcess
from support.apps import AppProcess, AppRig
from support.cli import cli, exits, one_error_line
from support.ledgers import read_entries
from support.scitt import scitt_cose_verifies
from support.softhsm import MODULE, PIN, Token, make_token

pytestmark = [pytest.mark.engine]

APP = Path(__file__).resolve().parent / "apps" / "outage_app.py"


@pytest.fixture
def token(tmp_path: Path) -> Token:
    return make_token(tmp_path)


def test_a_ledger_signed_in_the_token_verifies_with_only_its_exported_public_key(
        token: Token, engine: EngineProcess) -> None:
    url = f"sqlite:///{token.tmp / 'ledger.db'}"
    Ledger.open(url, create=True).close()
    with AppRig(engine) as rig:
        app = rig.add_app(AppProcess(
            engine, [APP], log=token.tmp / "app.log", ready="APP READY", ready_timeout=60,
            env={"HISTAUDIT_DB": url, "HISTAUDIT_KEY": token.uri(), "PYTHONUNBUFFERED": "1",
                 **token.env}))
        app.start()
        instance = rig.schedule("chain", {"n": 5, "pause": 0})
        state = rig.wait(instance, timeout=60)
        assert state.runtime_status.name == "COMPLETED", app.tail()
        assert json.loads(state.serialized_output) == {"x": 5}
    exported = cli("keys", "export-public", "--key", token.uri(), "--out", "trust",
                   "--name", "hsm", cwd=token.tmp, env=token.env)
    exits(exported)
    kid = exported.stdout.split()[2]
    doc = json.loads((token.tmp / "trust" / "hsm.pub.json").read_text())
    assert doc["kid"] == kid
    entries = read_entries(url, instance)
    assert len(entries) >= 12 and {e.kid for e in entries} == {kid}
    exits(cli("checkpoint", "--db", url, "--key", token.uri(), cwd=token.tmp, env=token.env))
    proved = cli("verify", "--all", "--full", "--json", "--db", url, "--trust", "trust",
                 cwd=token.tmp)
    exits(proved)
    assert json.loads(proved.stdout)["ok"] is True
    # issue #53 item 1: the token's key signs SCITT statements and receipts as well, and a
    # third-party verifier (scitt-cose) accepts them with the token's public key alone
    exits(cli("export", "--format", "scitt", "--db", url, "--key", token.uri(), "--trust",
              "trust", "--out", "scitt-bundle", cwd=token.tmp, env=token.env))
    statements = sorted((token.tmp / "scitt-bundle" / "scitt" / "entries").glob("*.cose"))
    assert len(statements) == len(entries)
    key_pem = pem(TrustStore.load(token.tmp / "trust").get(kid))
    for statement in statements:
        assert scitt_cose_verifies(statement, key_pem) == (True, True), statement.name
    bundle = cli("verify", "--bundle", "scitt-bundle", "--trust", "trust", cwd=token.tmp)
    exits(bundle)
    # no private key anywhere: nothing written holds one
    for path in token.tmp.rglob("*"):
        if path.is_file() and "tokens" not in path.parts:
            assert b"PRIVATE KEY" not in path.read_bytes(), path
    assert not list(token.tmp.rglob("*.key"))


def test_every_wrong_way_to_name_the_key_is_one_line_and_changes_nothing(
        token: Token) -> None:
    url = f"sqlite:///{token.tmp / 'ledger.db'}"
    Ledger.open(url, create=True).close()
    wrong_pin, open_pin = token.tmp / "wrong.pin", token.tmp / "open.pin"
    wrong_pin.write_text("0000\n")
    wrong_pin.chmod(0o600)
    open_pin.write_text(PIN + "\n")
    open_pin.chmod(0o644)
    cases = {
        token.uri(pin=str(wrong_pin)): "the PIN is wrong",
        token.uri().replace(f"pin-source=file:{token.pin_file}", f"pin-value={PIN}"):
            "pin-value is refused",
        token.uri(pin=str(open_pin)): "readable by others",
        token.uri(token="nope"): "token 'nope' is not in module",
        token.uri(key="nokey"): "no Ed25519 key pair labelled 'nokey'",
        token.uri(module=str(token.tmp / "nope.so")): "cannot load it",
        f"pkcs11:token=histaudit?module-path={MODULE}": "must name token=LABEL and object",
        # a NUL percent-encoded (issue #50): a ValueError of the OS layer, a traceback
        token.uri(pin=f"{token.pin_file}%00x"): "holds a control character",
        token.uri(module=f"{MODULE}%00x"): "holds a control character",
    }
    for uri, needle in cases.items():
        r = cli("checkpoint", "--db", url, "--key", uri, cwd=token.tmp, env=token.env)
        line = one_error_line(r, needle)
        assert PIN not in line and PIN not in r.stdout
    with Ledger.open(url) as ledger:
        assert ledger.leaf_count() == 0 and ledger.checkpoint_notes() == []


REMOVED_MID_RUN = """
import subprocess, sys
from histaudit.cli import main
from histaudit.ledger.pkcs11 import Pkcs11Signer

signed, sign = [0], Pkcs11Signer.sign


def removing(self, message):  # the token is pulled before the 3rd signature
    signed[0] += 1
    if signed[0] == 3:
        subprocess.run(["softhsm2-util", "--delete-token", "--token", "histaudit"],
                       check=True, capture_output=True, timeout=30)
    return sign(self, message)


Pkcs11Signer.sign = removing
main(sys.argv[1:])
"""


def test_a_token_removed_mid_retention_apply_is_one_line_and_the_ledger_verifies(
        token: Token, db_url: str) -> None:
    """Issue #50 item 9: the token pulled while ``retention apply`` signs its erasures
    through it (here before its 3rd signature, the 2nd erasure's entry) was sometimes
    ``pkcs11.exceptions.ObjectHandleInvalid`` as a traceback, exit 1. Now one line, exit
    2; the erasure under way is rolled back whole and the ledger verifies."""
    from histaudit.ledger import chain
    from histaudit.ledger.keys import generate_keypair
    from support.ledgers import committed

    _, pub, signer = generate_keypair(token.tmp / "keys", name="ops")
    with Ledger.open(db_url, create=True) as ledger:
        for n in range(4):
            ref, rows = committed(b'{"prompt":"private"}')
            chain.append(ledger, f"wf-{n}", "llm.call", {"output": {**ref, "k": True}},
                         signer=signer, payloads=rows)
    exported = cli("keys", "export-public", "--key", token.uri(), "--out", "keys",
                   "--name", "hsm", cwd=token.tmp, env=token.env)
    exits(exported)
    policy = token.tmp / "policy.json"
    policy.write_text(json.dumps({"version": 1,
                                  "payloads": [{"kinds": ["*"], "keep_days": 0}]}))
    run = subprocess.run([sys.executable, "-c", REMOVED_MID_RUN, "retention", "apply",
                          "--policy", str(policy), "--db", db_url, "--key", token.uri()],
                         env={**os.environ, **token.env}, cwd=token.tmp,
                         capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 2 and run.stdout == "", (run.returncode, run.stdout, run.stderr)
    (line,) = run.stderr.splitlines()
    assert line.startswith("histaudit: error: PKCS#11 token 'histaudit'") \
        and "removed" in line and PIN not in line, line
    erased = [e for n in range(4) for e in read_entries(db_url, f"wf-{n}")
              if e.kind == "payload.erased"]
    assert len(erased) == 1  # the first erasure, whole; the second never half-written
    exits(cli("verify", "--all", "--full", "--db", db_url, "--trust", "keys",
              cwd=token.tmp))
    assert pub.exists()
