"""histaudit.ledger.sha: the builtin SHA-256 and its HMAC give hashlib's and hmac's bytes."""

from __future__ import annotations

import hashlib
import hmac
import platform
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from histaudit.interceptor.recorder import AuditRecorder, payload_digest
from histaudit.ledger import records as rec
from histaudit.ledger import sha
from histaudit.ledger.keys import KeyFileSigner
from histaudit.ledger.store import Ledger


def test_cpython_hashes_on_the_path_with_its_builtin_module_not_openssl() -> None:
    # the point of the module: were the import to fall back, the figure-7 cut would be
    # gone without any digest changing
    assert platform.python_implementation() == "CPython"
    assert sha.single is not hashlib.sha256
    assert type(sha.single(b"")).__module__ in {"_sha2", "_sha256"}


@given(st.binary(max_size=5000))
def test_single_is_sha256(data: bytes) -> None:
    assert sha.single_hex(data) == hashlib.sha256(data).hexdigest()
    assert sha.single(data).digest() == hashlib.sha256(data).digest()


@given(st.binary(max_size=200), st.binary(max_size=3000))
def test_hmac_is_hmac_sha256_for_any_key_length(key: bytes, message: bytes) -> None:
    # keys up to 200 bytes: shorter than the 64-byte block, equal to it, and hashed first
    assert sha.Hmac(key).hexdigest(message) == hmac.digest(key, message, "sha256").hex()


def test_one_hmac_object_gives_each_message_its_own_digest() -> None:
    mac = sha.Hmac(b"k" * 32)
    first, second = mac.hexdigest(b"one"), mac.hexdigest(b"two")
    assert first == hmac.digest(b"k" * 32, b"one", "sha256").hex()
    assert second == hmac.digest(b"k" * 32, b"two", "sha256").hex()
    assert mac.hexdigest(b"one") == first  # the saved states are copied, never consumed
    assert "6b6b" not in repr(mac) and "k" * 8 not in repr(mac)


@given(st.binary(max_size=2000), st.binary(min_size=rec.SALT_BYTES, max_size=rec.SALT_BYTES))
def test_a_commitment_is_the_same_through_either_hash(payload: bytes, salt: bytes) -> None:
    assert rec.commit(payload, salt, sha256=sha.single) == rec.commit(payload, salt)
    assert rec.commitment_matches(rec.commit(payload, salt, sha256=sha.single), payload, salt)


def test_the_recorder_s_digests_and_commitments_are_those_a_verifier_recomputes(
        tmp_path: Path) -> None:
    signer = KeyFileSigner.generate()
    recorder = AuditRecorder(Ledger.open(f"sqlite:///{tmp_path}/l.db", create=True), signer)
    for instance, text in [("wf-1", '{"a": 1}'), ("wf-2", '{"a": 1}'), ("wf-1", "é" * 300)]:
        raw = text.encode()
        p = recorder.commit(instance, text)
        assert p.digest == recorder.digest(instance, raw) == payload_digest(signer, instance, raw)
        assert p.ref is not None
        (salt, (commitment, stored)), = p.rows.items()
        assert stored == raw and p.ref["c"] == commitment
        assert rec.commitment_matches(commitment, raw, salt)
    # the per-instance key differs: equal payloads of two instances digest differently
    assert recorder.digest("wf-1", b"x") != recorder.digest("wf-2", b"x")
