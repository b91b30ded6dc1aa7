"""verify.dapr_attestations: Dapr's completion attestations, built here from the format
(durabletask-go v0.12.4 ``backend/historysigning/attestation.go``) and signed by a leaf of a
tiny CA, then each way one can be wrong; and the ledger cross-check that recomputes an
attested ``ioDigest`` from what histaudit committed to. The real daprd's attestations are
checked in tests/integration/test_dapr_signing.py and test_dapr_crosscheck.py.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from histaudit.interceptor.recorder import AuditRecorder
from histaudit.ledger.chain import erase_payload
from histaudit.ledger.keys import KeyFileSigner
from histaudit.ledger.kinds import Kind
from histaudit.ledger.store import Ledger
from histaudit.verify.dapr_attestations import canonical_failure, check_attestations, io_digest
from histaudit.verify.dapr_crosscheck import crosscheck_dapr

from .test_dapr_history import T0, Key, _bytes, _int, _raw_sign, event, make_ca, make_leaf

INSTANCE = "wf-att"
INPUT, RESULT = '"hello"', '"hello!"'


def _string_value(text: str) -> bytes:
    return _bytes(1, text.encode("utf-8"))


def payload(*, name: str = "greet", task: int = 1, io: bytes | None = None,
            cert: bytes, status: int = 1, spec: int = 1, parent: str = INSTANCE) -> bytes:
    """An ActivityCompletionAttestationPayload, fields in number order (deterministic)."""
    io = io if io is not None else io_digest(INPUT, RESULT.encode())
    return (_bytes(1, parent.encode()) + _int(2, task) + _bytes(3, name.encode())
            + _bytes(4, io) + _bytes(5, cert) + _int(6, status) + _int(7, spec))


class Attester:
    """A signer of attestations: its leaf certificate, key and ext-sigcert row."""

    def __init__(self, ca: tuple[x509.Certificate, Key]) -> None:
        leaf, self.key = make_leaf(*ca)
        self.der = leaf.public_bytes(Encoding.DER)
        self.digest = hashlib.sha256(self.der).digest()
        self.row = _bytes(1, self.digest) + _bytes(2, self.der)

    def attestation(self, body: bytes) -> bytes:
        return _bytes(1, body) + _bytes(2, _raw_sign(self.key, hashlib.sha256(body).digest()))


def history(att: bytes | None, *, result: str = RESULT) -> list[bytes]:
    """TaskScheduled(1, greet, INPUT), then its TaskCompleted carrying ``att``."""
    scheduled = event(1, T0, _bytes(6, _bytes(1, b"greet") + _bytes(3, _string_value(INPUT))))
    done = _int(1, 1) + _bytes(2, _string_value(result))
    if att is not None:
        done += _bytes(4, att)
    return [scheduled, event(-1 & 0xFFFFFFFFFFFFFFFF, T0, _bytes(7, done))]


def check(events: list[bytes], rows: list[bytes], anchors: list[x509.Certificate], *,
          signed: bool = True) -> tuple[int, list[tuple[str, str]]]:
    found: list[tuple[str, str]] = []
    count = check_attestations(INSTANCE, events, rows, anchors,
                               lambda code, seq, msg: found.append((code, msg)), signed=signed)
    return count, found


@pytest.fixture(scope="module")
def ca() -> tuple[x509.Certificate, Key]:
    return make_ca()


@pytest.fixture(scope="module")
def attester(ca: tuple[x509.Certificate, Key]) -> Attester:
    return Attester(ca)


def test_io_digest_is_daprs() -> None:
    """The vectors durabletask-go's IODigest gives (computed with the Go code)."""
    assert io_digest(None, b"").hex() == hashlib.sha256(bytes(16)).hexdigest()
    assert io_digest(None, b"").hex().startswith("374708ff")
    digest = io_digest('"hello"', b'"hello!"').hex()
    assert digest.startswith("e90512e7") and digest.endswith("f2c3")
    # NFC: a decomposed é digests as the composed one
    assert io_digest("e\u0301", b"") == io_digest("\u00e9", b"")


def test_a_failure_is_length_prefixed_and_nested() -> None:
    inner = _bytes(1, b"E2")
    details = _bytes(1, b"ValueError") + _bytes(2, b"bad") + _bytes(4, inner) + _int(5, 1)
    assert canonical_failure(details) == (
        b"\x00\x00\x00\x0aValueError" + b"\x00\x00\x00\x03bad" + b"\x00\x00\x00\x00"
        + b"\x01" + b"\x00\x00\x00\x02E2" + bytes(8) + b"\x00")


def test_a_good_attestation_verifies(ca: tuple[x509.Certificate, Key],
                                     attester: Attester) -> None:
    att = attester.attestation(payload(cert=attester.digest))
    assert check(history(att), [attester.row], [ca[0]]) == (1, [])


@pytest.mark.parametrize(("change", "says"), [
    ({"name": "other"}, "names activity"),
    ({"task": 7}, "names task 7"),
    ({"parent": "someone-else"}, "of 'someone-else'"),
    ({"status": 2}, "says FAILED"),
    ({"io": io_digest(INPUT, b'"forged"')}, "ioDigest is not that of"),
    ({"spec": 2}, "spec version 2"),
])
def test_an_attestation_of_something_else_is_invalid(
        ca: tuple[x509.Certificate, Key], attester: Attester, change: dict[str, Any],
        says: str) -> None:
    att = attester.attestation(payload(cert=attester.digest, **change))
    count, found = check(history(att), [attester.row], [ca[0]])
    assert count == 1 and [c for c, _ in found] == ["dapr-attestation-invalid"], found
    assert says in found[0][1] and "event 1 (activity task 1)" in found[0][1]


def test_a_signature_by_another_key_or_ca_is_invalid(ca: tuple[x509.Certificate, Key],
                                                     attester: Attester) -> None:
    other = Attester(ca)
    body = payload(cert=attester.digest)
    forged = _bytes(1, body) + _bytes(2, _raw_sign(other.key, hashlib.sha256(body).digest()))
    _, found = check(history(forged), [attester.row], [ca[0]])
    assert "signature does not verify" in found[0][1]
    _, found = check(history(attester.attestation(body)), [attester.row], [make_ca()[0]])
    assert "trust anchor" in found[0][1]


def test_an_unknown_certificate_and_a_bad_row_are_findings(ca: tuple[x509.Certificate, Key],
                                                           attester: Attester) -> None:
    att = attester.attestation(payload(cert=attester.digest))
    _, found = check(history(att), [], [ca[0]])
    assert "no ext-sigcert row" in found[0][1]
    lying = _bytes(1, bytes(32)) + _bytes(2, attester.der)
    _, found = check(history(att), [lying, attester.row], [ca[0]])
    assert [c for c, _ in found] == ["dapr-state-inconsistent"]


def test_a_signed_history_must_attest_every_completion(ca: tuple[x509.Certificate, Key]
                                                       ) -> None:
    assert check(history(None), [], [ca[0]]) == (0, [(
        "dapr-attestation-missing", "completion event 1 carries no attestation of its result")])
    assert check(history(None), [], [ca[0]], signed=False) == (0, [])


# -- against the ledger ------------------------------------------------------------------

def _ledger(tmp_path: Path, result: str) -> tuple[Ledger, AuditRecorder]:
    ledger = Ledger.open(f"sqlite:///{tmp_path / 'l.db'}", create=True)
    rec = AuditRecorder(ledger, KeyFileSigner.generate())
    inp, out = rec.commit(INSTANCE, INPUT), rec.commit(INSTANCE, result)
    rec.append(INSTANCE, Kind.WORKFLOW_SCHEDULED_ACTIVITY,
               {"activity": "greet", "task_id": 1, "input": inp.ref}, inp)
    rec.append(INSTANCE, Kind.ACTIVITY_COMPLETED,
               {"activity": "greet", "task_id": 1, "output": out.ref}, out)
    rec.writer.flush()
    return ledger, rec


@pytest.mark.parametrize(("ledger_result", "codes"), [
    (RESULT, []),
    ('"hello?"', ["dapr-attestation-ledger-mismatch"]),
])
def test_an_attested_result_is_recomputed_from_the_ledger(
        tmp_path: Path, attester: Attester, ledger_result: str, codes: list[str]) -> None:
    """Dapr attests RESULT; the ledger committed to ``ledger_result``."""
    att = attester.attestation(payload(cert=attester.digest))
    ledger, _ = _ledger(tmp_path, ledger_result)
    with ledger, ledger.snapshot() as snap:
        found = crosscheck_dapr(INSTANCE, history(att), snap.entries(INSTANCE), snap.payload)
    mine = [f for f in found if f.code.startswith("dapr-attestation")]
    assert [f.code for f in mine] == codes
    if codes:
        assert mine[0].seq == 2 and "activity greet (task 1, event 1)" in mine[0].message


def test_an_erased_result_is_passed_over(tmp_path: Path, attester: Attester) -> None:
    att = attester.attestation(payload(cert=attester.digest))
    ledger, rec = _ledger(tmp_path, '"hello?"')
    with ledger:
        completed = next(e for e in rec.entries(INSTANCE) if e.kind == Kind.ACTIVITY_COMPLETED)
        erase_payload(ledger, INSTANCE, completed.data["output"]["c"], signer=rec.signer,
                      record={"reason": "test"})
        with ledger.snapshot() as snap:
            found = crosscheck_dapr(INSTANCE, history(att), snap.entries(INSTANCE),
                                    snap.payload)
    assert not [f for f in found if f.code.startswith("dapr-attestation")]
