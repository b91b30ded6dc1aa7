"""The signer contract (issue #51): every implementation of ``histaudit.ledger.keys.Signer``
in ``SIGNERS`` — a key file, a key in a real SoftHSM2 token, a key in a real Vault transit
engine — named as a user names it and loaded by ``load_signer``, is held to the same
promises:

* it is a ``Signer`` of the class its name's scheme registers, its key id derived from its
  public key;
* ``sign`` gives the 64-byte Ed25519 signature of exactly the bytes given (one byte more
  does not verify), for an empty message and a 64 KiB one too;
* ``sign_all`` gives, in order, exactly what ``sign`` gives one by one (Ed25519 is
  deterministic), and nothing for nothing;
* a forked child signs with the parent's signer (a token session or a connection must not
  cross the fork);
* its ``repr`` shows no secret (PIN, token) and no key material;
* a ledger appended through it verifies with its public key alone.

Each case runs in a child process: a PKCS#11 library reads its configuration once per
process. Cost: ≈ 3 s of CPU and 5 s of wall (a token, a Vault dev server, three children).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from histaudit.ledger.keys import generate_keypair
from histaudit.ledger.signers import SIGNERS
from support.softhsm import PIN, make_token
from support.vault import Vault

CONTRACT = """
import json, os, sys
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from histaudit.config import Settings
from histaudit.ledger import chain
from histaudit.ledger.keys import Signer, TrustStore, key_id
from histaudit.ledger.signers import load_signer
from histaudit.ledger.store import Ledger
from histaudit.verify import verify_instance

name, db, secrets = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
signer = load_signer(name, Settings.from_env())
public = Ed25519PublicKey.from_public_bytes(signer.public.raw)


def verifies(signature, message):
    try:
        public.verify(signature, message)
        return len(signature) == 64
    except InvalidSignature:
        return False


messages = [b"", b"histaudit", bytes(range(256)) * 256]
one_by_one = [signer.sign(m) for m in messages]
pid = os.fork()
if pid == 0:
    os._exit(0 if verifies(signer.sign(b"child"), b"child") else 1)
_, status = os.waitpid(pid, 0)
with Ledger.open(f"sqlite:///{db}", create=True) as ledger:
    for i in range(3):
        chain.append(ledger, "wf-1", "step.done", {"i": i}, signer=signer)
    report = verify_instance(ledger, "wf-1", trust=TrustStore([signer.public]), full=True)
print(json.dumps({
    "class": type(signer).__name__, "is_signer": isinstance(signer, Signer),
    "kid_derived": signer.kid == key_id(signer.public.raw) == signer.public.kid,
    "signs_exactly": [verifies(s, m) and not verifies(s, m + b"x")
                      for s, m in zip(one_by_one, messages)],
    "sign_all_is_sign": signer.sign_all(messages) == one_by_one,
    "sign_all_empty": signer.sign_all([]) == [],
    "forked_child_signs": os.waitstatus_to_exitcode(status) == 0,
    "repr_clean": not any(s in repr(signer) for s in secrets + ["PRIVATE", "-----"]),
    "ledger_verifies": report.ok and report.entries == 3,
}))
"""


#: each case and the class its key name must load as
CASES = {"key file": "KeyFileSigner", "pkcs11": "Pkcs11Signer", "transit": "TransitSigner"}


class Case:
    def __init__(self, name: str, env: dict[str, str], secrets: list[str]) -> None:
        self.name, self.env, self.secrets = name, env, secrets


@pytest.fixture(params=list(CASES), ids=lambda p: p.replace(" ", "-"))
def case(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Case]]:
    expected = CASES[request.param]
    if request.param == "key file":
        key, _, _ = generate_keypair(tmp_path / "keys", name="contract")
        yield expected, Case(str(key), {}, [])
    elif request.param == "pkcs11":
        token = make_token(tmp_path)
        yield expected, Case(token.uri(), token.env, [PIN])
    else:
        with Vault(tmp_path) as vault:
            vault.make_key("contract")
            yield expected, Case(vault.key_url("contract"), {}, [vault.token])


@pytest.mark.vault
def test_every_registered_signer_keeps_the_contract(case: tuple[str, Case],
                                                    tmp_path: Path) -> None:
    expected, c = case
    run = subprocess.run(
        [sys.executable, "-c", CONTRACT, c.name, str(tmp_path / "ledger.db"),
         json.dumps(c.secrets)],
        env={**os.environ, **c.env}, capture_output=True, text=True, timeout=120,
        check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout) == {
        "class": expected, "is_signer": True, "kid_derived": True,
        "signs_exactly": [True, True, True], "sign_all_is_sign": True,
        "sign_all_empty": True, "forked_child_signs": True, "repr_clean": True,
        "ledger_verifies": True}


def test_the_cases_cover_every_registered_signer() -> None:
    """A signer added to SIGNERS without a case here fails this test."""
    registered = {where.partition(":")[2] for where in SIGNERS.values()}
    assert registered | {"KeyFileSigner"} == set(CASES.values())  # the default: key files
