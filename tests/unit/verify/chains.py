"""Chains of stored rows built in memory, and the verifier as it composed its checks before
the fast loop: the reference the unit tests compare :func:`verify_chain` against."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from histaudit.ledger import records
from histaudit.ledger.keys import KeyFileSigner, PublicKey, Signer, TrustStore
from histaudit.ledger.records import StoredEntry, StoredHead
from histaudit.verify.check import ChainCheck, run_checks
from histaudit.verify.crosscheck import EngineCrossCheck
from histaudit.verify.findings import Finding
from histaudit.verify.integrity import HeadCheck, IntegrityCheck
from histaudit.verify.payloads import PayloadCheck, PayloadLookup
from histaudit.verify.report import finding_order
from histaudit.verify.signatures import KeyCheck, SignatureCheck

from .original_behaviour import OriginalBehaviourCheck

INSTANCE = "wf"


def _lettered_signer() -> Signer:
    """A new key whose kid holds a hex letter, so its upper-case form is another kid (one
    key in ~1,900 has a kid of digits only, which made such a case a no-op)."""
    while True:
        signer = KeyFileSigner.generate()
        if any(c in "abcdef" for c in signer.kid):
            return signer


SIGNER = _lettered_signer()
WINDOWED = KeyFileSigner.generate()
"""Trusted only from 2026-12-01T00:00:00Z to 2026-12-01T00:00:01Z."""
STRANGER = KeyFileSigner.generate()
"""Not in :data:`TRUST`."""
TRUST = TrustStore([SIGNER.public,
                    PublicKey(kid=WINDOWED.kid, raw=WINDOWED.public.raw,
                              not_before="2026-12-01T00:00:00Z",
                              not_after="2026-12-01T00:00:01Z")])


def ts_for(i: int) -> str:
    """Entry ``i``'s timestamp: 0.3 s apart, so the seconds (and the window) move on."""
    micros = 300_000 * i
    return f"2026-12-01T00:{micros // 60_000_000:02d}:{micros // 1_000_000 % 60:02d}." \
           f"{micros % 1_000_000:06d}Z"


def entry_doc(seq: int, leaf: int, prev: str, kind: str, data: dict[str, Any], *,
              instance: str = INSTANCE, kid: str = SIGNER.kid, ts: str | None = None
              ) -> dict[str, Any]:
    return {"v": 1, "type": "entry", "instance": instance, "seq": seq, "leaf": leaf,
            "prev": prev, "kind": kind, "ts": ts or ts_for(seq), "kid": kid, "data": data}


def dumps(doc: Any) -> bytes:
    """Sorted compact JSON: canonical for what ``entry_body`` accepts, and also writes
    what it refuses (floats, big integers) for the tests that need such bodies."""
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)


def stored(body: bytes, *, leaf: int, seq: int, signer: Signer = SIGNER,
           instance: str = INSTANCE, digest: str | None = None) -> StoredEntry:
    return StoredEntry(leaf, instance, seq, digest or records.sha256_hex(body), body,
                       signer.sign(body))


def chain(steps: Sequence[tuple[str, dict[str, Any]]], *, signers: Sequence[Signer] = (),
          instance: str = INSTANCE) -> list[StoredEntry]:
    """A well-formed chain of ``steps`` (kind, data); ``signers[i]`` signs entry i+1."""
    rows: list[StoredEntry] = []
    prev = records.GENESIS_PREV
    for i, (kind, data) in enumerate(steps):
        signer = signers[i] if i < len(signers) else SIGNER
        body = dumps(entry_doc(i + 1, i, prev, kind, data, instance=instance,
                               kid=signer.kid))
        rows.append(stored(body, leaf=i, seq=i + 1, signer=signer, instance=instance))
        prev = rows[-1].hash
    return rows


def head_of(rows: Sequence[StoredEntry], *, instance: str = INSTANCE) -> StoredHead:
    last = rows[-1]
    body = records.head_body(instance=instance, seq=last.seq, leaf=last.leaf, hash=last.hash,
                             ts=ts_for(last.seq), kid=SIGNER.kid)
    return StoredHead(instance, last.seq, body, SIGNER.sign(body))


def reference(rows: Iterable[StoredEntry], head: StoredHead | None, *, full: bool = False,
              trust: TrustStore = TRUST, instance: str = INSTANCE,
              payload_lookup: PayloadLookup | None = None,
              engine_history: Iterable[Any] | None = None) -> tuple[int, list[Finding]]:
    """(rows, findings) as ``verify_chain`` made them before the fast loop: ``run_checks``
    (``parse_entry`` and every ``observe``), and the original behaviour analyzer."""
    integrity = IntegrityCheck(instance, canonical=full)
    checks: list[ChainCheck] = [integrity, KeyCheck(instance, trust)]
    if payload_lookup is not None:
        checks.append(PayloadCheck(payload_lookup))
    if full:
        checks.append(SignatureCheck(instance, trust, 1))
    checks += [HeadCheck(instance, head, integrity, trust), OriginalBehaviourCheck(instance)]
    if engine_history is not None:
        checks.append(EngineCrossCheck(instance, engine_history, lambda _c: None))
    count, findings = run_checks(rows, checks)
    findings.sort(key=finding_order)
    return count, findings
