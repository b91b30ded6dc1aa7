"""Checkpoint notes an attacker hands the verifier (docs/bundle.md §4.2).

A note is checked by exact bytes: whatever it is turned into, ``parse_note`` either
raises InputError (it does not read as a signed note) or SignatureError (no trusted key
signed its text), or it returns a checkpoint whose text is byte for byte the signed one.
The witness policy's ``judge`` reads the same hostile notes without any other exception.
"""

from __future__ import annotations

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from hypothesis import given, settings
from hypothesis import strategies as st

from histaudit.errors import InputError, SignatureError
from histaudit.ledger.checkpoint import note_text, parse_note, sign_note
from histaudit.ledger.keys import KeyFileSigner, PublicKey, TrustStore
from histaudit.witness.policy import WitnessPolicy

ORIGIN = "histaudit/00000000-0000-4000-8000-000000000000"
SIGNER = KeyFileSigner(Ed25519PrivateKey.from_private_bytes(bytes(range(32))))
STRANGER = KeyFileSigner(Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33))))
TRUST = TrustStore([PublicKey(kid=SIGNER.kid, raw=SIGNER.public.raw)])
NOTE = sign_note(ORIGIN, 7, hashlib.sha256(b"root").digest(), SIGNER)
TEXT = note_text(NOTE)
# A note the stranger signed, and the trusted note with the stranger's line added after.
STRANGE = sign_note(ORIGIN, 7, hashlib.sha256(b"root").digest(), STRANGER)
BOTH = NOTE + STRANGE[len(note_text(STRANGE)) + 1:]

_WITNESS = Ed25519PrivateKey.from_private_bytes(bytes(range(2, 34)))
_RAW = _WITNESS.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
_HASH = hashlib.sha256(b"w.example/a\n\x04" + _RAW).digest()[:4]
_VKEY = f"w.example/a+{_HASH.hex()}+" + base64.b64encode(b"\x04" + _RAW).decode()
POLICY = WitnessPolicy.parse(f"witness a {_VKEY}\nquorum a\n")
COSIGNED = NOTE + "— w.example/a ".encode() + base64.b64encode(
    _HASH + (5).to_bytes(8, "big")
    + _WITNESS.sign(b"cosignature/v1\ntime 5\n" + TEXT)) + b"\n"


def _mutate(note: bytes, edits: list[tuple[int, int, bytes]]) -> bytes:
    """Replace ``length`` bytes at ``at`` (modulo the size) with ``new``, edit by edit."""
    for at, length, new in edits:
        at %= len(note) + 1
        note = note[:at] + new + note[at + length:]
    return note


_PIECES = st.sampled_from([b"\n", b"\n\n", b" ", "— ".encode(), b"=", b"0", b"-1",
                           b"99999999999999999999", b"\xff", b"\r\n", ORIGIN.encode(),
                           "\u0661".encode(), b"A" * 88])
_EDITS = st.lists(st.tuples(st.integers(0, 400), st.integers(0, 6),
                            st.one_of(_PIECES, st.binary(max_size=6))), min_size=1,
                  max_size=4)


def _check(note: bytes) -> None:
    try:
        cp = parse_note(note, TRUST, source="n")
        error = ""
    except (InputError, SignatureError) as exc:
        error = str(exc)
    if error:
        assert error.startswith("n") and "\n" not in error
    else:  # it verified: then the signed text is exactly the original one
        assert note_text(note) == TEXT
        assert (cp.origin, cp.size, cp.kid) == (ORIGIN, 7, SIGNER.kid)
    if b"\n\n" not in note:
        with pytest.raises(InputError, match="not a signed note"):
            POLICY.judge(note)
    elif POLICY.judge(note).satisfied:
        assert note_text(note) == TEXT


@settings(max_examples=400, deadline=None)
@given(base=st.sampled_from([NOTE, BOTH, COSIGNED, STRANGE]), edits=_EDITS)
def test_an_edited_note_verifies_only_with_its_signed_text_unchanged(
        base: bytes, edits: list[tuple[int, int, bytes]]) -> None:
    _check(_mutate(base, edits))


@settings(max_examples=200, deadline=None)
@given(junk=st.binary(max_size=300))
def test_any_bytes_are_a_note_error_or_a_verified_note(junk: bytes) -> None:
    _check(junk)


def test_the_unedited_notes_read_as_they_should() -> None:
    """The property tests above would pass vacuously if nothing ever verified."""
    for note in (NOTE, BOTH, COSIGNED):
        assert parse_note(note, TRUST).kid == SIGNER.kid
    assert POLICY.judge(COSIGNED).satisfied and not POLICY.judge(NOTE).satisfied
    with pytest.raises(SignatureError, match="no valid signature by a trusted key"):
        parse_note(STRANGE, TRUST)
